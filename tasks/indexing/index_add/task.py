"""Scatter-add of rows: out = x with src's rows added at the rows named by index (torch.index_add along dim 0)."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

# unit roundoff per dtype: the relative error of one rounded addition
_U = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


def reference(x, index, src):
    return x.index_add(0, index, src)


def make_inputs(shape, dtype, gen, distribution, device):
    v, d, t = shape
    x = sample((v, d), dtype, gen, distribution, device)
    src = sample((t, d), dtype, gen, distribution, device)
    index = torch.randint(0, v, (t,), generator=gen, device=device)
    if distribution == "sparse":
        # 90% of the rows go to row 0: heavy contention on one destination (atomics serialise there)
        index = index * (torch.rand((t,), generator=gen, device=device) < 0.1)
    return x, index.to(torch.int64), src


def error_bound(inputs, dtype):
    """(hits + 1) x u x (|x| + sum of |src| added there) per element, u the dtype's unit roundoff (2^-24,
    2^-11, 2^-8): the standard bound of a sum of hits + 1 terms added one at a time in the output's dtype, in
    any order. A kernel that adds with atomics (order set by the hardware) or in another order stays under
    it; one that drops a duplicate (a plain store instead of an add) misses by that row's value."""
    x, index, src = inputs
    mag = x.abs().index_add(0, index, src.abs())
    hits = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device).index_add(
        0, index, torch.ones(index.shape[0], dtype=torch.float64, device=x.device))
    return mag * (hits[:, None] + 1) * _U[dtype]


TASK = TaskSpec(
    name="IndexAdd",
    version=0,
    category="indexing",
    statement=("Scatter-add rows: x (shape [V, D]), index (shape [T], int64, each in [0, V), with repeats) and "
               "src (shape [T, D], x's dtype). Return out = x.index_add(0, index, src): a new tensor of x's "
               "shape and dtype where out[v] = x[v] + the sum of src[t] over every t with index[t] == v. The "
               "additions may run in any order (atomic adds are fine), in the dtype or in float32. The shape "
               "tuple is (V, D, T)."),
    entry_point="index_add",
    signature="index_add(x: Tensor[V, D], index: Tensor[T] (int64), src: Tensor[T, D]) -> Tensor[V, D]",
    reference=reference,
    make_inputs=make_inputs,
    # "sparse": 90% of the rows land on row 0 (contention, and a kernel that stores instead of adding
    # loses all but one); "large" (std 30); index uniform with repeats everywhere else.
    distributions=("normal", "sparse", "large", "uniform"),
    workloads={
        # Small: the slow solution walks every src row in one program per column block.
        "cpu": Workload(public=((20, 96, 40), (13, 77, 30)), heldout=((9, 130, 50),),
                        dtypes=("float32", "float16")),
        # Embedding-gradient accumulation over a 32k vocabulary and MoE top-8 combine (65536 expert rows into
        # 8192 tokens); held out: an odd width (3583) over GPT-2's vocabulary and a DeepSeek-width combine
        # with 8 rows per destination. 0.7-1.3 GB moved, floors 150-280 us at 4.8 TB/s.
        "cuda": Workload(public=((32000, 4096, 16384), (8192, 4096, 65536)),
                         heldout=((50257, 3583, 9000), (5000, 7168, 40000)),
                         dtypes=("float32", "float16")),
    },
    # One rounding of the result (u); the accumulation order is covered by error_bound.
    tolerances={"float32": Tolerance(0.0, 2.0 ** -24), "float16": Tolerance(0.0, 2.0 ** -11),
                "bfloat16": Tolerance(0.0, 2.0 ** -8)},
    error_bound=error_bound,
    flops=lambda s: s[2] * s[1],                         # one add per element of src
    # x read and out written once, src read once, the index read once.
    min_bytes=lambda s, d: (2 * s[0] * s[1] + s[2] * s[1]) * itemsize(d) + s[2] * 8,
    written_bytes=lambda s, d: s[0] * s[1] * itemsize(d),
    level=2,
    tags=("indexing", "scatter", "index_add", "atomics", "memory-bound"),
    motivation=("The backward of every embedding lookup and gather, and MoE's combine of expert outputs back "
                "into tokens, are scatter-adds with repeated destinations: atomics, contention and the order "
                "of float additions are the whole difficulty."),
    solutions=(
        Solution("triton_atomic.py", "triton", "optimized",
                 note="a vectorized copy of x into out, then one program per (src row, 1024-column block) "
                      "adding its slice into the destination row with tl.atomic_add"),
        Solution("triton_column_serial.py", "triton", "slow", defect="too_few_programs",
                 note="one program per 256-column block walks all V rows (the copy) and then all T src rows "
                      "in sequence, read-modify-writing the destination: D / 256 programs in all"),
        Solution("tilelang_atomic.py", "tilelang", "optimized",
                 note="a coalesced tiled copy of x into out, then [4 src rows, 1024 columns] tiles over 256 "
                      "threads, each element added into its destination with T.atomic_add (int64 offsets); "
                      "runs on the C target (cpu-verified)"),
    ),
)
