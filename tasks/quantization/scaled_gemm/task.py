"""Scaled low-bit GEMM: FP8 e4m3 or int8 A @ B^T with per-row scales of A and per-column scales of B, to bf16."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

# B is drawn from this distribution for each of A's.
_B_DISTRIBUTION = {"normal": "normal", "uniform": "uniform", "sparse": "normal", "large": "normal",
                   "offset": "offset"}


def reference(a, b, scale_a, scale_b):
    if a.is_cuda and a.dtype == torch.float8_e4m3fn:
        # cuBLASLt's FP8 GEMM with row-wise scales (fast accumulation off: full float32 accumulation)
        return torch._scaled_mm(a, b.t(), scale_a=scale_a[:, None], scale_b=scale_b[None, :],
                                out_dtype=torch.bfloat16)
    if a.is_cuda and a.dtype == torch.int8:
        c = torch._int_mm(a, b.t()).to(scale_a.dtype)           # exact int32 accumulation
    else:
        c = a.to(scale_a.dtype) @ b.to(scale_a.dtype).t()
    y = c * scale_a[:, None] * scale_b[None, :]
    return y if scale_a.dtype == torch.float64 else y.to(torch.bfloat16)


def make_inputs(shape, dtype, gen, distribution, device):
    m, n, k = shape
    a = sample((m, k), dtype, gen, distribution, device)      # int8: the whole range; fp8: clamped, rounded
    b = sample((n, k), dtype, gen, _B_DISTRIBUTION[distribution], device)
    # positive per-token and per-channel scales (amax / 448 or / 127 of real tensors)
    scale_a = sample((m,), "float32", gen, "positive", device, scale=1e-2)
    scale_b = sample((n,), "float32", gen, "positive", device, scale=1e-2)
    return a, b, scale_a, scale_b


def error_bound(inputs, dtype):
    """2^-12 x (|A| @ |B|^T) x scale_a x scale_b per element: room for the float32 accumulation of K exact
    products (int8 products sum exactly in int32; e4m3 products are exact in float32) and for Hopper's FP8
    tensor cores, which keep ~14 significant bits inside one wgmma K-chunk (DeepSeek-V3, section 3.3.2):
    4x the error of 14-bit sums re-promoted to float32 every 128 K. A bfloat16 accumulator (8 bits) errs by
    ~2^-9 x |C| per addition, far past it at these K."""
    a, b, sa, sb = inputs
    mag = a.double().abs() @ b.double().abs().t()
    return mag * sa.double()[:, None] * sb.double()[None, :] * 2.0 ** -12


# bfloat16 output: the float64 reference is exact; a kernel rounds C x scale_a x scale_b once to bfloat16
# (half an ulp, at most 2^-8 relative) after float32 scale products (2^-23). rtol 8e-3 is one whole ulp:
# Triton 3.7's interpreter casts float32 to bfloat16 by truncation (tests/test_lowbit_dtypes.py). atol 0: a
# C that cancels to near 0 is covered by the error bound, which follows |A| @ |B|^T, not |C|.
TOL = Tolerance(0.0, 8e-3)

TASK = TaskSpec(
    name="ScaledGemm",
    version=0,
    category="quantization",
    statement=("Scaled low-bit matrix multiplication: A of shape [M, K] and B of shape [N, K] (both row-major, "
               "both float8_e4m3fn or both int8), scale_a of shape [M] and scale_b of shape [N] (float32). "
               "Return C[i, j] = (sum_k A[i, k] * B[j, k]) * scale_a[i] * scale_b[j] as a new bfloat16 tensor "
               "of shape [M, N]. Accumulate exactly enough: int8 in int32, float8 in float32 (on Hopper, "
               "promote the tensor cores' partial sums to a float32 accumulator at least every 128 of K). The "
               "shape tuple is (M, N, K)."),
    entry_point="scaled_gemm",
    signature="scaled_gemm(a: Tensor[M, K], b: Tensor[N, K], scale_a: Tensor[M], scale_b: Tensor[N]) -> "
              "Tensor[M, N] (bfloat16)",
    reference=reference,
    make_inputs=make_inputs,
    # "large" (std 30): float8 values clamped at 448 in a third of A; "offset" (mean 8): every product
    # positive, |C| ~ 64 K, the sum a dropped K tile or a 16-bit accumulator gets wrong by far; "sparse":
    # 90% zeros in A.
    distributions=("normal", "offset", "uniform", "large", "sparse"),
    output_dtype=lambda dtype: "bfloat16",
    workloads={
        # Small for the interpreter. 48, 40, 80 and 72 are not multiples of the 32-wide tiles: the M, N and
        # K edge masks all run. float8 and int8 tl.dot run under the interpreter (tests/test_lowbit_dtypes.py).
        "cpu": Workload(public=((32, 32, 64), (48, 40, 80)), heldout=((40, 72, 48),),
                        dtypes=("float8_e4m3fn", "int8")),
        # Llama-3-8B/70B-class projections in FP8/W8A8 serving: square 8192^3 (556 us at 1979 TFLOPS) and an
        # MLP up-projection; held out: M = 3000 (not a tile multiple) with a long K, and a decode-sized M = 64
        # (memory-bound: B's 235 MB read, 49 us). N and K stay multiples of 16, as cuBLASLt's FP8 GEMM and
        # torch._int_mm require of the library baseline.
        "cuda": Workload(public=((8192, 8192, 8192), (4096, 14336, 4096)),
                         heldout=((3000, 5120, 13824), (64, 28672, 8192)),
                         dtypes=("float8_e4m3fn", "int8")),
    },
    tolerances={"float8_e4m3fn": TOL, "int8": TOL},
    error_bound=error_bound,
    flops=lambda s: 2 * s[0] * s[1] * s[2],
    # A and B read once (1 byte each), both scale vectors once, C written once in bfloat16.
    min_bytes=lambda s, d: (s[0] * s[2] + s[1] * s[2]) * itemsize(d) + (s[0] + s[1]) * 4 + s[0] * s[1] * 2,
    written_bytes=lambda s, d: s[0] * s[1] * 2,
    # torch.compile of _scaled_mm / _int_mm calls the same library kernels: eager is the strong baseline here
    baselines=("torch", "torch.compile"),
    level=3,
    tags=("quantization", "fp8", "int8", "gemm", "tensor-cores", "compute-bound"),
    motivation=("FP8 (Hopper, Blackwell) and int8 W8A8 GEMMs with per-token and per-channel scales carry most "
                "of the FLOPs of quantized LLM serving and of FP8 training; the scales fold into the epilogue, "
                "and Hopper's FP8 accumulation precision is a trap a kernel must handle."),
    solutions=(
        Solution("triton_tiled.py", "triton", "optimized",
                 note="tiled tl.dot (wgmma on Hopper) over 128x128x128 tiles, each K tile's product added "
                      "into a float32 (int32 for int8) accumulator, scales applied in the epilogue, grouped "
                      "program order"),
        Solution("triton_row_vector.py", "triton", "slow", defect="no_tiling",
                 note="one program per row of C and 64 columns: 64-wide K slices multiplied elementwise and "
                      "summed on the CUDA cores (no tl.dot, no tensor cores), B re-read by every row of C"),
        Solution("tilelang_pipelined.py", "tilelang", "optimized", cpu_status="unverified",
                 note="GPU-style: 128x128 tiles of C, 128-wide K tiles of A and B staged in shared memory by "
                      "a 3-stage T.Pipelined loop (TMA on sm_90a), T.gemm (wgmma, B transposed) into a per-K-tile "
                      "fragment promoted into a float32 (int32) accumulator, scales in the epilogue; does not "
                      "lower to the C target, compiled for sm_90a only on the cpu backend"),
    ),
)
