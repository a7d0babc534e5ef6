"""A linear layer with a fused ReLU epilogue: y = relu(x @ weight^T + bias), weight laid out like nn.Linear."""
import math

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

# as in Matmul: the weight follows x's distribution except for "large" (large x alone)
_W_DISTRIBUTION = {"normal": "normal", "uniform": "uniform", "offset": "offset", "sparse": "sparse",
                   "large": "normal"}


def reference(x, weight, bias):
    return torch.relu(torch.nn.functional.linear(x, weight, bias))


def make_inputs(shape, dtype, gen, distribution, device):
    m, n, k = shape
    x = sample((m, k), dtype, gen, distribution, device)
    # 1/sqrt(K) keeps x @ weight^T of order one (see Matmul); a unit-normal bias then moves about half of
    # the outputs across the ReLU's kink, so a missing bias, ReLU or a bias added after the ReLU all fail.
    weight = sample((n, k), dtype, gen, _W_DISTRIBUTION[distribution], device, scale=1.0 / math.sqrt(k))
    bias = sample((n,), dtype, gen, "normal", device)
    return x, weight, bias


TASK = TaskSpec(
    name="LinearReLU",
    version=0,
    level=3,
    tags=('compute-bound', 'epilogue-fusion', 'tensor-cores'),
    motivation=("A linear layer with its bias and activation fused into the GEMM's epilogue, as in MLP blocks: saves a full read and write of the output."),
    category="gemm",
    statement=("A linear layer with a fused ReLU: y = relu(x @ weight^T + bias), with x of shape [M, K], "
               "weight of shape [N, K] (as nn.Linear stores it) and bias of shape [N], all contiguous and of "
               "one dtype: float16 or bfloat16 (float32 and float16 on the cpu backend). Accumulate in "
               "float32, add the bias and apply the ReLU before the single rounding to the input dtype; return "
               "a new y of shape [M, N]. The shape tuple is (M, N, K)."),
    entry_point="linear_relu",
    signature="linear_relu(x: Tensor[M, K], weight: Tensor[N, K], bias: Tensor[N]) -> Tensor[M, N]",
    reference=reference,
    make_inputs=make_inputs,
    distributions=("normal", "offset", "uniform", "large", "sparse"),
    workloads={
        # as in Matmul: small for the interpreter, with M, N and K edges off the block multiples
        "cpu": Workload(public=((64, 64, 64), (200, 72, 80)), heldout=((48, 136, 40),),
                        dtypes=("float32", "float16")),
        # transformer-MLP-like shapes (a 4096 -> 14336 up-projection), one square, one off every tile size
        "cuda": Workload(public=((4096, 4096, 4096), (8192, 14336, 4096)),
                         heldout=((8192, 8192, 8192), (3000, 5000, 4000)),
                         dtypes=("float16", "bfloat16")),
    },
    # As Matmul's (float32 accumulation against a float64 reference, then one rounding to the output
    # dtype): the bias add and the ReLU are exact in float32 and add no error of their own.
    tolerances={"float32": Tolerance(1e-4, 1e-4), "float16": Tolerance(1e-3, 2e-3),
                "bfloat16": Tolerance(8e-3, 1.6e-2)},
    # 2MNK for the product, MN bias adds, MN max(., 0)
    flops=lambda s: 2 * s[0] * s[1] * s[2] + 2 * s[0] * s[1],
    min_bytes=lambda s, d: (s[0] * s[2] + s[1] * s[2] + s[1] + s[0] * s[1]) * itemsize(d),
    solutions=(
        Solution("triton_fused.py", "triton", "optimized",
                 note="tiled tl.dot against the K-major weight (wgmma), float32 accumulator, bias and ReLU in "
                      "registers before the one store; grouped program order; autotuned Hopper configs"),
        Solution("triton_fp32_upcast.py", "triton", "slow", defect="needless_dtype_conversion",
                 note="the same tiled kernel, but every loaded tile is converted to float32 before tl.dot: "
                      "TF32 tensor-core math at half the fp16/bf16 rate, plus the conversions"),
        Solution("tilelang_pipelined.py", "tilelang", "optimized",
                 note="128x128x32 tiles in shared memory, T.gemm with transpose_B into a float32 fragment, "
                      "T.Pipelined with 3 stages, bias and ReLU on the fragment", cpu_status="unverified"),
        Solution("tilelang_naive.py", "tilelang", "slow", defect="no_tiling",
                 note="one block per 128 outputs of one row, a float32 fragment accumulator and a serial K "
                      "loop; no shared-memory tiles and no tensor cores (runs on the C target)"),
    ),
)
