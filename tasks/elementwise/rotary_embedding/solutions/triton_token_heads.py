# RoPE (rotate_half layout): one program per (token, block of BLOCK_H heads). The token's cos/sin rows
# (D/2 values each) are loaded once and broadcast over the heads; the first and second halves of each
# head are loaded as two contiguous [BLOCK_H, D/2] tiles, rotated in float32 (products of float16 values
# are exact there) and stored with one rounding. q is read once, the output written once. BLOCK_D2 is
# D/2 rounded up to a power of two (masked for D = 96); BLOCK_H is chosen so a program handles ~4K
# elements. Offsets in int64 (T * H * D passes 2^31 for long prefills).
import torch
import triton
import triton.language as tl


@triton.jit
def _rope_kernel(q_ptr, cos_ptr, sin_ptr, out_ptr, h, d, half,
                 BLOCK_H: tl.constexpr, BLOCK_D2: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    i = tl.arange(0, BLOCK_D2)
    imask = i < half
    c = tl.load(cos_ptr + t * half + i, mask=imask, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + t * half + i, mask=imask, other=0.0).to(tl.float32)
    mask = (heads[:, None] < h) & imask[None, :]
    offs = t * h * d + heads[:, None].to(tl.int64) * d + i[None, :]
    q1 = tl.load(q_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    q2 = tl.load(q_ptr + offs + half, mask=mask, other=0.0).to(tl.float32)
    o1 = q1 * c[None, :] - q2 * s[None, :]
    o2 = q2 * c[None, :] + q1 * s[None, :]
    tl.store(out_ptr + offs, o1.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_ptr + offs + half, o2.to(out_ptr.dtype.element_ty), mask=mask)


def rotary_embedding(q, cos, sin):
    q = q.contiguous()
    cos = cos.contiguous()
    sin = sin.contiguous()
    t, h, d = q.shape
    half = d // 2
    out = torch.empty_like(q)
    block_d2 = triton.next_power_of_2(half)
    block_h = max(1, min(triton.next_power_of_2(h), 2048 // block_d2))
    grid = (t, triton.cdiv(h, block_h))
    _rope_kernel[grid](q, cos, sin, out, h, d, half, BLOCK_H=block_h, BLOCK_D2=block_d2, num_warps=4)
    return out
