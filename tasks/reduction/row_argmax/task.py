"""Row argmax: the index of the largest element of each row of a 2-D tensor (greedy decoding over logits)."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize


def reference(x):
    return torch.argmax(x, dim=-1)


def make_inputs(shape, dtype, gen, distribution, device):
    x = sample(shape, dtype, gen, distribution, device)
    if distribution == "uniform":
        # clipped at 0 (exact in every dtype): about half of every row equals its maximum, 0, so the
        # first-occurrence tie-break is checked on every such trial, within a lane and across lanes
        x = x.clamp(max=0)
    return (x,)


TASK = TaskSpec(
    name="RowArgmax",
    version=0,
    category="reduction",
    statement=("For each row of x (shape [M, N]) return the index of its largest element. Return a new int64 "
               "tensor of shape [M]. Ties are broken toward the smallest index (the first occurrence of the "
               "maximum, as torch.argmax does): the index must match exactly. Compare the values in x's own "
               "dtype or wider (upcasting to float32 is exact and changes no order). Rows hold no NaN."),
    entry_point="row_argmax",
    signature="row_argmax(x: Tensor[M, N]) -> Tensor[M] (int64)",
    reference=reference,
    make_inputs=make_inputs,
    # Ties are the trap: "uniform" inputs are clipped at 0 (see make_inputs), so half of every row ties
    # at its maximum; real bfloat16 logits (8 significant bits) also tie at the top in a good fraction of
    # 128k-wide rows. A kernel that keeps the last maximal index, or combines per-lane or per-chunk candidates
    # without taking the smallest index among equal maxima, fails. "sparse" rows are 90% exact zeros;
    # "small", "large" and "normal" are the ordinary case (timed on "normal").
    distributions=("normal", "small", "sparse", "uniform", "large"),
    timed_distribution="normal",
    workloads={
        # Small: the slow solution reads each row one scalar at a time. 200, 257 and 2500 are not powers of
        # two (masked tails); 2500 spans several of the optimized kernel's 1024-wide chunks plus a tail, and
        # with the distribution order below its first float32 trial gets the tied "uniform" inputs.
        "cpu": Workload(public=((6, 128), (5, 200)), heldout=((4, 2500), (3, 257)),
                        dtypes=("float32", "float16")),
        # Logits [tokens, vocab]: Llama-2 (32000), Llama-3 (128256), GPT-2 (50257), Qwen2 (151936) vocabularies;
        # 0.26-0.9 GB (bf16) / 0.5-1.8 GB (fp32) read per call: 60-430 us at the H200's ~4.2 TB/s.
        "cuda": Workload(public=((4096, 32000), (2048, 128256)), heldout=((5000, 50257), (1500, 151936)),
                         dtypes=("bfloat16", "float32")),
    },
    # The output is an index: only the exact index passes (atol = rtol = 0). The reference runs in the
    # input dtype (reference_in_float64=False): an upcast to float64 would not change the order either, but
    # the index dtype must stay int64.
    tolerances={"float32": Tolerance(0.0, 0.0), "float16": Tolerance(0.0, 0.0),
                "bfloat16": Tolerance(0.0, 0.0)},
    flops=lambda s: s[0] * s[1],                                  # one compare per element
    min_bytes=lambda s, d: s[0] * s[1] * itemsize(d) + s[0] * 8,  # x read once, [M] int64 written once
    output_dtype=lambda dtype: "int64",
    reference_in_float64=False,
    level=2,   # a reduction with a numerical trap (ties broken to the first index, NaN rows) (core/task.py LEVELS; re-applied in issue 34)
    tags=("argmax", "logits", "greedy-decoding", "tie-break"),
    motivation=("Greedy decoding and speculative-decoding verification take the argmax of every token's "
                "logits over a 32k-152k vocabulary; at these widths it is a pure bandwidth-bound pass over "
                "the largest activation an LLM produces."),
    solutions=(
        Solution("triton_lanes.py", "triton", "optimized",
                 note="one program per row; the row is walked in BLOCK-wide vectorized chunks, each lane keeps "
                      "its running maximum and first index (strict >), and one final tl.max plus a tl.min over "
                      "the indices of lanes holding the maximum picks the first occurrence"),
        Solution("triton_scalar_loop.py", "triton", "slow", defect="scalar_loop",
                 note="one program per row, the row scanned one scalar load at a time with a strict > "
                      "comparison (correct tie-break, no vectorization or parallel reduction)"),
    ),
)
