"""Top-k along the last dim: the indices of each row's k largest values, largest first."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize


def reference(x, k):
    return torch.topk(x, k, dim=-1).indices


def make_inputs(shape, dtype, gen, distribution, device):
    m, n, k = shape
    x = sample((m, n), dtype, gen, distribution, device)
    if distribution == "uniform":
        x = (x.float() * 4).round().to(x.dtype)     # 9 levels in [-4, 4]: the top k is full of exact ties
    return x, int(k)


def output_view(inputs, idx):
    """Ties make the indices ambiguous (torch.topk's order among equal values is unspecified), so the indices
    are compared through the values they select: out[i, j] -> x[i, out[i, j]], which must equal the
    reference's values exactly and in order (largest first). Each index must lie in [0, N) and appear once
    per row; an output breaking either is a mismatch with its own message."""
    x = inputs[0]
    if idx.dtype != torch.int64:
        raise ValueError(f"indices must be int64, not {idx.dtype}")
    if bool(((idx < 0) | (idx >= x.shape[-1])).any()):
        raise ValueError(f"an index lies outside [0, {x.shape[-1]})")
    s = idx.sort(dim=-1).values
    if bool((s[..., 1:] == s[..., :-1]).any()):
        raise ValueError("an index appears twice in one row")
    return x.gather(-1, idx)


TASK = TaskSpec(
    name="TopK",
    version=0,
    category="indexing",
    statement=("For each row of x (shape [M, N]) return the indices of its k largest values (k: a Python int), "
               "ordered from the "
               "largest value down: a new int64 tensor of shape [M, k]. Among equal values any order and any "
               "choice is correct (the check compares the values the indices select, which must equal "
               "torch.topk's exactly and in order; every index in [0, N), none twice in a row). Rows hold no "
               "NaN. The shape tuple is (M, N, k)."),
    entry_point="top_k",
    signature="top_k(x: Tensor[M, N], k: int) -> Tensor[M, k] (int64)",
    reference=reference,
    make_inputs=make_inputs,
    output_view=output_view,
    # "uniform": rounded to 9 levels, so the k-th value is tied with many others; "sparse": 90% zeros (the
    # top k may reach into the zeros); "large" and "small" scale the logits.
    distributions=("normal", "uniform", "sparse", "large", "small"),
    timed_distribution="normal",
    output_dtype=lambda dtype: "int64",
    reference_in_float64=False,
    workloads={
        # Small: the interpreter's tl.sort costs seconds per 512-wide sort under load, and the slow solution
        # runs k full passes over the row. 100, 130 and 77 are not powers of two; 120 with k = 16 keeps
        # 16 of 120 (more than one tie level of the "uniform" rows).
        "cpu": Workload(public=((6, 100, 5), (5, 130, 8)), heldout=((4, 77, 3), (3, 120, 16)),
                        dtypes=("float32", "float16")),
        # Sampling's top-50 over the Llama-3 vocabulary, and an MoE router's top-8 of 256 experts (DeepSeek-V3)
        # over a 256k-token batch; held out: Qwen2's vocabulary with top-40, and Kimi-K2's 384 experts with
        # top-6 (not powers of two). bf16: 0.13-1.05 GB read, floors 28-219 us at 4.8 TB/s.
        "cuda": Workload(public=((4096, 128256, 50), (262144, 256, 8)),
                         heldout=((2000, 151936, 40), (180000, 384, 6)),
                         dtypes=("bfloat16", "float32")),
    },
    # Compared through output_view: the selected values must equal the reference's exactly.
    tolerances={"float32": Tolerance(0.0, 0.0), "float16": Tolerance(0.0, 0.0), "bfloat16": Tolerance(0.0, 0.0)},
    flops=lambda s: s[0] * s[1],                   # one comparison per element, at least
    # x read once, [M, k] int64 written once.
    min_bytes=lambda s, d: s[0] * s[1] * itemsize(d) + s[0] * s[2] * 8,
    written_bytes=lambda s, d: s[0] * s[2] * 8,
    level=2,
    tags=("indexing", "top-k", "selection", "sort", "tie-break", "memory-bound"),
    motivation=("Top-k runs in every sampler (top-k and top-p truncation over a 32k-256k vocabulary) and in "
                "every MoE router (top-2 to top-8 of 8-384 experts per token); at these widths it is a "
                "selection problem that must still run near bandwidth."),
    solutions=(
        Solution("triton_chunk_sort.py", "triton", "optimized",
                 note="two stages: one program per (row, 2048-wide chunk) sorts packed (value, index) int64 "
                      "keys with tl.sort and keeps the chunk's top k; one program per row sorts the candidates "
                      "and writes the k indices"),
        Solution("triton_k_passes.py", "triton", "slow", defect="sequential_reduction",
                 note="one program per row, k dependent passes over the whole row, each finding the largest "
                      "key below the previous one"),
        Solution("tilelang_radix_select.py", "tilelang", "optimized",
                 note="no sort (TileLang has none): one 128-thread block per row, a radix select of the k-th "
                      "largest order-preserving key 4 bits a round (8 rounds for float32, 5 or 4 for 16-bit), "
                      "per-thread local histograms folded with atomic adds, then one gathering pass with atomic "
                      "tickets and a k^2 rank count for the order; runs on the C target (cpu-verified)"),
    ),
)
