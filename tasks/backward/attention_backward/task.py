"""Attention backward (non-causal, one head per (b, h)): dQ, dK, dV from q, k, v and dO, stacked [3, B, H, S, D]."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

_V_DISTRIBUTION = {"large": "normal"}       # as in DecodeAttention: "large" scales q and k only


def reference(q, k, v, do):
    # What a training step runs: autograd of torch's fused attention (flash / memory-efficient kernels on
    # cuda in 16 bits: the forward statistics are recomputed, as the task asks of a kernel; the math backend
    # in float64 for the checker).
    with torch.enable_grad():
        q_, k_, v_ = (t.detach().requires_grad_() for t in (q, k, v))
        o = torch.nn.functional.scaled_dot_product_attention(q_, k_, v_)
        dq, dk, dv = torch.autograd.grad(o, (q_, k_, v_), do)
    return torch.stack([dq, dk, dv])


def make_inputs(shape, dtype, gen, distribution, device):
    b, h, s, d = shape
    qk_scale = 0.2 if distribution == "large" else 1.0     # scores of std ~36 on 'large' (see decode)
    q = sample((b, h, s, d), dtype, gen, distribution, device, scale=qk_scale)
    k = sample((b, h, s, d), dtype, gen, distribution, device, scale=qk_scale)
    v = sample((b, h, s, d), dtype, gen, _V_DISTRIBUTION.get(distribution, distribution), device)
    do = sample((b, h, s, d), dtype, gen, "normal", device)
    return q, k, v, do


def error_bound(ins, dtype):
    """What a flash-style kernel may owe beyond the output's own rounding: it rounds P and dS to the input
    dtype to feed tensor-core dots (u = 2^-11 fp16, 2^-8 bf16; float32 inputs: tl.dot's TF32, 2^-11) and
    accumulates in float32. Per output element that is u times the same product of magnitudes:
    dV: |P|^T |dO|; dS = P (dP - delta) with dP = dO V^T, so |dS| <= |P| (|dO| |V|^T + |delta|), and
    dQ: scale |dS|' |K|, dK: scale |dS|'^T |Q|, |dS|' that magnitude bound. Four times that."""
    q, k, v, do = ins
    u = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}.get(dtype, 2.0 ** -11)
    scale = q.shape[-1] ** -0.5
    p = torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1)
    o = p @ v
    delta = (do * o).sum(-1, keepdim=True).abs()
    ds = p * (do.abs() @ v.abs().transpose(-1, -2) + delta)
    return 4 * u * torch.stack([scale * ds @ k.abs(), scale * ds.transpose(-1, -2) @ q.abs(),
                                p.transpose(-1, -2) @ do.abs()])


TASK = TaskSpec(
    name="AttentionBackward",
    version=0,
    category="backward",
    statement=("The backward of non-causal scaled dot-product attention O = softmax(Q K^T * D^-0.5) V for "
               "q, k, v and the upstream gradient dO, all of shape [B, H, S, D] (contiguous, the same dtype; "
               "one head of K and V per query head; D a power of two, 16 to 128). The forward's statistics are "
               "not given: recompute them. "
               "With P = softmax(Q K^T * D^-0.5) per (b, h) and delta_i = sum_d dO[i, d] O[i, d]: dV = P^T dO, "
               "dP = dO V^T, dS = P * (dP - delta), dQ = dS K * D^-0.5, dK = dS^T Q * D^-0.5. Return ONE new "
               "tensor of shape [3, B, H, S, D] in the input dtype holding dQ, dK, dV in that order. Softmax "
               "and accumulations in float32 (subtract the row maximum); P and dS may be rounded to the input "
               "dtype to feed tensor-core products. The shape tuple is (B, H, S, D)."),
    entry_point="attention_backward",
    signature=("attention_backward(q: Tensor[B, H, S, D], k: Tensor[B, H, S, D], v: Tensor[B, H, S, D], "
               "do: Tensor[B, H, S, D]) -> Tensor[3, B, H, S, D]"),
    reference=reference,
    make_inputs=make_inputs,
    # "large": q, k std 6 (scores std ~36: exp overflows without the max subtraction, P nearly one-hot);
    # "uniform"; "sparse" (ties); "normal" (timed).
    distributions=("normal", "large", "uniform", "sparse"),
    workloads={
        # Tiny for the interpreter (the slow solution's row walk took ~30 s a call at S = 40 on a loaded
        # machine): S = 12, 20 and 17 are not multiples of the optimized solution's 16-row cpu blocks (masked
        # query rows and keys on both sides of every product; 20 and 17 span two blocks).
        "cpu": Workload(public=((1, 2, 12, 16), (1, 1, 20, 32)), heldout=((1, 1, 17, 16),),
                        dtypes=("float32", "float16")),
        # Training sequence lengths of 7B-class models (head_dim 128 and 64): 0.17-0.35 PFLOP per call
        # (>= 170 us at ~990 TFLOP/s); held out: an odd length (1999: partial blocks everywhere) and one long
        # sequence with few heads (1 x 8 x 4096: only 8 (b, h) pairs, the grid must come from S).
        "cuda": Workload(public=((4, 16, 2048, 128), (8, 32, 1024, 64)),
                         heldout=((2, 12, 1999, 64), (1, 8, 4096, 128)),
                         dtypes=("float16", "bfloat16")),
    },
    # The reference is float64 on the same rounded inputs. Outputs: one rounding (u: rtol = 4u), plus what
    # rounding P and dS to 16 bits for the tensor-core products costs (error_bound, 4u times the magnitudes
    # those products sum; it also covers TF32 for float32 inputs). atol guards exact zeros only (the 'sparse'
    # inputs leave whole rows of dO-weighted terms near 0). A kernel that skips the delta term, forgets the
    # scale in dQ or dK, or uses a stale maximum misses by O(1) relative.
    tolerances={"float32": Tolerance(1e-5, 1e-4), "float16": Tolerance(1e-5, 2e-3),
                "bfloat16": Tolerance(1e-5, 1.6e-2)},
    error_bound=error_bound,
    # The minimal work: S = Q K^T, dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q (2 B H S^2 D each; delta
    # = rowsum(P * dP) needs no O); a flash kernel recomputes S and runs O = P V besides (~14).
    flops=lambda s: 10 * s[0] * s[1] * s[2] * s[2] * s[3],
    # q, k, v, dO read once; dQ, dK, dV written once
    min_bytes=lambda s, d: 7 * s[0] * s[1] * s[2] * s[3] * itemsize(d),
    written_bytes=lambda s, d: 3 * s[0] * s[1] * s[2] * s[3] * itemsize(d),
    level=3,
    tags=("attention", "backward", "training", "flash-attention", "compute-bound", "recompute"),
    motivation=("The attention backward is the most expensive kernel of long-context training (about 2.5x "
                "the forward's flops); FlashAttention-2/3's backward recomputes P from saved statistics, "
                "splits the work into a dK/dV pass over key blocks and a dQ pass, and never writes the "
                "S x S matrices."),
    solutions=(
        Solution("triton_flash.py", "triton", "optimized",
                 note="flash backward in three kernels: a forward pass per query block for the logsumexp and "
                      "delta = rowsum(dO * O); a dK/dV kernel per key block looping over query blocks (P "
                      "recomputed from the logsumexp, tl.dot products, P and dS rounded to the input dtype); "
                      "a dQ kernel per query block looping over key blocks"),
        Solution("triton_row_serial.py", "triton", "slow", defect="too_few_programs",
                 note="one program per (b, h) walks the S query rows one at a time (vector products, no "
                      "tl.dot), read-modify-writing float32 dK/dV accumulators it alone owns: B * H programs, "
                      "S^2 / BLOCK dependent steps each"),
        Solution("tilelang_flash.py", "tilelang", "optimized", cpu_status="unverified",
                 note="flash backward in three launches, 64x64 tiles: a forward per query block for the base-2 "
                      "logsumexp and delta (T.gemm, T.reduce_max/sum); a dK/dV kernel per key block walking the "
                      "query blocks (pipelined Q/dO copies, P^T and dS^T staged in shared memory in the input "
                      "dtype for T.gemm); a dQ kernel per query block; GPU-style, so the cpu backend only "
                      "compiles it (sm_90a)"),
    ),
)
