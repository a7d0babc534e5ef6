"""Row argsort: the permutation that sorts each row of x from its largest value down."""
import math

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize


def reference(x):
    return torch.argsort(x, dim=-1, descending=True)


def make_inputs(shape, dtype, gen, distribution, device):
    m, n = shape
    x = sample((m, n), dtype, gen, distribution, device)
    if distribution == "uniform":
        x = (x.float() * 4).round().to(x.dtype)     # 9 levels in [-4, 4]: every row is runs of exact ties
    return (x,)


def output_view(inputs, idx):
    """Ties make the permutation ambiguous (torch.argsort's order among equal values is unspecified unless
    stable), so the indices are compared through the values they pick: out[i, j] -> x[i, out[i, j]], which
    must equal the reference's sorted values exactly and in order (largest first). Each row of the output must
    be a permutation of 0..N-1 (every index in [0, N), each exactly once); an output breaking that is a
    mismatch with its own message."""
    x = inputs[0]
    if idx.dtype != torch.int64:
        raise ValueError(f"indices must be int64, not {idx.dtype}")
    if tuple(idx.shape) != tuple(x.shape):
        raise ValueError(f"indices have shape {tuple(idx.shape)}, expected {tuple(x.shape)}")
    n = x.shape[-1]
    if bool(((idx < 0) | (idx >= n)).any()):
        raise ValueError(f"an index lies outside [0, {n})")
    # In range and N of them per row: a permutation exactly when no index repeats, i.e. the sorted row is
    # 0..N-1 (checked by adjacent equality, which needs no [M, N] arange).
    s = idx.sort(dim=-1).values
    if bool((s[..., 1:] == s[..., :-1]).any()):
        raise ValueError("an index appears twice in one row (the row is not a permutation)")
    return x.gather(-1, idx)


def _sort_comparisons(s):
    """log2(N!) ~ N log2 N comparisons per row: the comparison-sort lower bound (no floating-point math)."""
    m, n = s
    return m * n * max(1, math.ceil(math.log2(n)))


TASK = TaskSpec(
    name="RowArgsort",
    version=0,
    category="indexing",
    statement=("For each row of x (shape [M, N]) return the permutation that sorts it in descending order: a "
               "new int64 tensor of shape [M, N] whose row i lists the column indices of x[i] from its largest "
               "value down (torch.argsort(x, dim=-1, descending=True)). Among equal values any order is "
               "correct (the check compares the values the indices select, x[i, out[i, j]], which must equal "
               "the sorted row exactly; every row must be a permutation of 0..N-1). Rows hold no NaN. The "
               "shape tuple is (M, N)."),
    entry_point="row_argsort",
    signature="row_argsort(x: Tensor[M, N]) -> Tensor[M, N] (int64)",
    reference=reference,
    make_inputs=make_inputs,
    output_view=output_view,
    # "uniform": rounded to 9 levels, so every row is long runs of ties (a kernel whose tie handling breaks
    # the permutation, e.g. a rank count that gives equal values the same slot, fails there); "sparse": 90%
    # zeros, one huge tie; "large" and "small" scale the values (the order key must not lose them).
    distributions=("normal", "uniform", "sparse", "large", "small"),
    timed_distribution="normal",
    output_dtype=lambda dtype: "int64",
    # Indices of the input dtype's own values: sorted in that dtype, no float64 upcast.
    reference_in_float64=False,
    workloads={
        # Tiny: the slow solution's one launch per bitonic stage (28-36 launches at these widths) costs
        # seconds under the interpreter. 100, 130, 77 and 200 are not powers of two (masked tails).
        "cpu": Workload(public=((6, 100), (5, 130)), heldout=((4, 77), (3, 200)),
                        dtypes=("float32", "float16")),
        # An MoE router ranking all 256 experts of DeepSeek-V3 for every token of a 256k-token batch, and
        # 16k rows of 4096 scores (a sparse-attention indexer ranking 4096 key blocks per query, a beam or
        # speculative-decoding tree ranking a 4k candidate list); held out: Kimi-K2's 384 experts over 180k
        # tokens, and 24k rows of 3000 (not a power of two nor a multiple of 16: a masked tail in every
        # row). 67-72M elements, 0.67-0.86 GB moved (x read, int64 written), floors 160-206 us on the H200.
        # Vocabulary-wide rows (128k-256k, top-p sampling) are left to TopK/TopPSample: a whole-row sort
        # there needs a multi-pass merge or radix sort, a different task.
        "cuda": Workload(public=((262144, 256), (16384, 4096)),
                         heldout=((180000, 384), (24000, 3000)),
                         dtypes=("bfloat16", "float32")),
    },
    # Compared through output_view: the selected values must equal the reference's exactly. Sorting does no
    # arithmetic, so a correct kernel's values are the input's own bits: no rounding to allow for.
    tolerances={"float32": Tolerance(0.0, 0.0), "float16": Tolerance(0.0, 0.0), "bfloat16": Tolerance(0.0, 0.0)},
    flops=_sort_comparisons,
    # x read once, [M, N] int64 written once.
    min_bytes=lambda s, d: s[0] * s[1] * (itemsize(d) + 8),
    written_bytes=lambda s, d: s[0] * s[1] * 8,
    level=2,
    tags=("indexing", "sort", "argsort", "permutation", "tie-break", "memory-bound"),
    motivation=("Sorting rows by score runs in MoE routing (ranking experts per token for capacity and "
                "grouped routing), in samplers (sorted candidate lists for top-p/min-p and beam search) and in "
                "sparse attention's block selection; at 256-4096 wide a row fits on chip, so a good kernel "
                "sorts it in registers in one pass and runs near bandwidth."),
    dsl_gaps={"tilelang": (
        "TileLang 0.1.15 has no sort or argsort primitive (nothing like Triton's tl.sort or CUB's block radix "
        "sort; its tile operators stop at reductions, cumsum and gemm), and a full-row argsort needs one: a "
        "reduction or selection (as TopK and TopPSample use) yields k elements, not a permutation, and ranking "
        "by counting is O(N^2) per row. The remaining route is a hand-written bitonic network (78 compare-exchange stages at N = 4096, "
        "a block barrier after each) over a shared-memory key buffer, i.e. writing the missing primitive "
        "itself; it would be GPU-only, since shared memory does not lower to the cpu backend's C target.")},
    solutions=(
        Solution("triton_register_sort.py", "triton", "optimized",
                 note="one program per block of rows: each value becomes an order-preserving integer packed "
                      "with its column into one key (int32 for 16-bit inputs, int64 for float32), the whole "
                      "row is sorted in registers by a bitonic network (reshape to a size-2 pair axis, max and "
                      "min over it), and the columns are unpacked and written once"),
        Solution("triton_global_bitonic.py", "triton", "slow", defect="no_tiling",
                 note="the textbook global-memory bitonic sort: one launch per bitonic stage (36 at N=256, 78 "
                      "at N=4096), each reading and writing every int64 key through HBM, where one on-chip "
                      "tile would hold the whole row"),
    ),
)
