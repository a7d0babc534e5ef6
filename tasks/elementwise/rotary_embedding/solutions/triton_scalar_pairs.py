# Slow by construction (defect: scalar_loop): one program per (token, head), rotating its D/2 pairs one at
# a time: every step does four scalar loads and two scalar stores. Correct, but each load is a single
# element (no vectorization, no memory-level parallelism inside a program) and the loop runs D/2
# dependent iterations per head.
import torch
import triton
import triton.language as tl


@triton.jit
def _rope_pairs(q_ptr, cos_ptr, sin_ptr, out_ptr, h, d, half):
    t = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    base = t * h * d + head * d
    for i in range(0, half):
        c = tl.load(cos_ptr + t * half + i).to(tl.float32)
        s = tl.load(sin_ptr + t * half + i).to(tl.float32)
        q1 = tl.load(q_ptr + base + i).to(tl.float32)
        q2 = tl.load(q_ptr + base + i + half).to(tl.float32)
        tl.store(out_ptr + base + i, (q1 * c - q2 * s).to(out_ptr.dtype.element_ty))
        tl.store(out_ptr + base + i + half, (q2 * c + q1 * s).to(out_ptr.dtype.element_ty))


def rotary_embedding(q, cos, sin):
    q = q.contiguous()
    cos = cos.contiguous()
    sin = sin.contiguous()
    t, h, d = q.shape
    out = torch.empty_like(q)
    _rope_pairs[(t, h)](q, cos, sin, out, h, d, d // 2)
    return out
