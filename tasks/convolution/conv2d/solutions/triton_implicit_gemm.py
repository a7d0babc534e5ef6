# Conv2d (NCHW, stride 1, 'same' zero padding) as an implicit GEMM: rows are output pixels (n, h, w),
# columns are output channels k, and the reduction runs over (r, s, channel block), each step one tl.dot
# of a gathered [BLOCK_M, BLOCK_K] input tile and a [BLOCK_K, BLOCK_N] weight tile, accumulated in fp32.
# The zero padding is a mask on the gather: taps outside the image load 0.
import torch
import triton
import triton.language as tl


def _configs():
    # The first config is small: the interpreter (cpu backend) runs only the first one.
    cfgs = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16}, num_warps=4, num_stages=2)]
    for bm, bn, bk, warps, stages in ((128, 64, 32, 4, 3), (128, 128, 32, 8, 3), (64, 64, 32, 4, 4),
                                      (128, 128, 64, 8, 3), (64, 128, 32, 4, 4), (256, 64, 32, 8, 3)):
        cfgs.append(triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=warps,
                                  num_stages=stages))
    return cfgs


@triton.autotune(configs=_configs(), key=["N", "C", "H", "W", "K", "R", "S"])
@triton.jit
def _conv2d_igemm(x_ptr, w_ptr, y_ptr, N, C, H, W, K,
                  R: tl.constexpr, S: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    HW = H * W
    M = N * HW
    CRS = C * R * S

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)      # output pixels
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)      # output channels
    offs_c = tl.arange(0, BLOCK_K)                        # input channels within a block
    m_ok = offs_m < M
    n_ok = offs_n < K
    img = offs_m // HW
    pix = offs_m % HW
    oh = pix // W
    ow = pix % W
    x_img = img * C * HW

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for r in range(R):
        ih = oh + (r - R // 2)
        h_ok = (ih >= 0) & (ih < H)
        for s in range(S):
            iw = ow + (s - S // 2)
            pix_ok = m_ok & h_ok & (iw >= 0) & (iw < W)
            x_base = x_img + ih * W + iw                 # [BLOCK_M], channel 0
            w_base = offs_n * CRS + r * S + s            # [BLOCK_N], channel 0
            for c0 in range(0, C, BLOCK_K):
                cc = c0 + offs_c
                c_ok = cc < C
                a = tl.load(x_ptr + x_base[:, None] + cc[None, :] * HW,
                            mask=pix_ok[:, None] & c_ok[None, :], other=0.0)
                b = tl.load(w_ptr + w_base[None, :] + cc[:, None] * (R * S),
                            mask=c_ok[:, None] & n_ok[None, :], other=0.0)
                acc = tl.dot(a, b, acc)

    y_off = (img * K * HW + pix)[:, None] + offs_n[None, :] * HW
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def conv2d(x, weight):
    x = x.contiguous()
    weight = weight.contiguous()
    n, c, h, w = x.shape
    k, _, r, s = weight.shape
    y = torch.empty((n, k, h, w), dtype=x.dtype, device=x.device)
    grid = lambda meta: (triton.cdiv(n * h * w, meta["BLOCK_M"]), triton.cdiv(k, meta["BLOCK_N"]))
    _conv2d_igemm[grid](x, weight, y, n, c, h, w, k, R=r, S=s)
    return y
