"""Fused residual add + ReLU: relu(x + y) over two 2-D tensors of the same shape."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize, numel


def reference(x, y):
    return torch.relu(x + y)


def make_inputs(shape, dtype, gen, distribution, device):
    x = sample(shape, dtype, gen, distribution, device)
    y = sample(shape, dtype, gen, distribution, device)
    return x, y


TASK = TaskSpec(
    name="AddReLU",
    version=0,
    level=2,   # a fused op (add, then relu, in one pass) (core/task.py LEVELS; re-applied in issue 34)
    tags=('memory-bound', 'fusion', 'activation'),
    motivation=('A residual add fused with ReLU: the pattern of every residual block in CNNs and MLPs, where an unfused add then ReLU reads the data twice.'),
    category="elementwise",
    statement=("Compute relu(x + y) elementwise for two tensors x and y of the same shape [M, N] and dtype "
               "(a fused residual add and activation). Return a new tensor of that shape and dtype; add in "
               "float32 and round once to the output dtype."),
    entry_point="add_relu",
    signature="add_relu(x: Tensor[M, N], y: Tensor[M, N]) -> Tensor[M, N]",
    reference=reference,
    make_inputs=make_inputs,
    # Five distributions (coprime with the 2 dtypes x 2 seeds of each shape): every one meets every dtype.
    distributions=("normal", "uniform", "large", "sparse", "offset"),
    workloads={
        # 40 x 77 = 3080 elements spans several 1024-element blocks plus a masked tail; 7 x 130 is odd.
        "cpu": Workload(public=((16, 128), (40, 77)), heldout=((7, 130),), dtypes=("float32", "float16")),
        # 64M-100M elements: 384 MB (fp16) to 1.2 GB (fp32) moved per call (two reads, one write).
        "cuda": Workload(public=((8192, 8192), (32768, 3072)), heldout=((6000, 5001), (16384, 4096)),
                         dtypes=("float16", "float32")),
    },
    # The reference runs in float64. A float32 add is exact to half an ulp; float16/bfloat16 outputs carry
    # one rounding to the output dtype (half an ulp: 4.9e-4 / 3.9e-3 relative). Near zero the sum cancels
    # and only an absolute bound makes sense: fp16's spacing below 6e-5 is 6e-8.
    tolerances={"float32": Tolerance(1e-6, 1e-6), "float16": Tolerance(1e-3, 1e-3),
                "bfloat16": Tolerance(1e-2, 1e-2)},
    flops=lambda s: 2 * numel(s),                      # one add, one max per element
    min_bytes=lambda s, d: 3 * numel(s) * itemsize(d),  # x and y read once, the output written once
    solutions=(
        Solution("triton_blocked.py", "triton", "optimized",
                 note="flat 1-D blocks, unmasked (vectorized) full blocks, masked tail, autotuned block size"),
        Solution("triton_single_program.py", "triton", "slow", defect="too_few_programs",
                 note="a single program walks the whole tensor in 1024-element blocks"),
        Solution("tilelang_tiled.py", "tilelang", "optimized",
                 note="2-D tiles of 32 x 256 elements, T.Parallel over the tile, bounds-guarded"),
    ),
)
