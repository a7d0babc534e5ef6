"""MoE token permute: copy each token's hidden row to its k experts' slots, rows grouped by expert (stable)."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

ZIPF_S = 1.0        # expert popularity ~ 1 / rank^s over a random order of the experts (a few hot ones)


def reference(x, topk_ids, num_experts):
    k = topk_ids.shape[1]
    order = torch.sort(topk_ids.reshape(-1).long(), stable=True).indices      # flat index t * k + j
    return x[order // k]


def routing(t: int, e: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """[t, k] int32 distinct experts per token, drawn (on the host) with a Zipf-like popularity."""
    order = torch.randperm(e, generator=gen)
    probs = torch.empty(e)
    probs[order] = 1.0 / torch.arange(1, e + 1, dtype=torch.float32) ** ZIPF_S
    return torch.multinomial(probs.expand(t, e), k, replacement=False, generator=gen).to(torch.int32)


def make_inputs(shape, dtype, gen, distribution, device):
    t, h, e, k = shape
    # the routing from a seed taken from the trial's generator (child and checker draw the same), drawn on
    # the host, then moved
    seed = int(torch.randint(0, 2 ** 62, (1,), generator=gen, device=device))
    ids = routing(t, e, k, torch.Generator().manual_seed(seed)).to(device)
    x = sample((t, h), dtype, gen, distribution, device)
    return x, ids, e


TASK = TaskSpec(
    name="MoeTokenPermute",
    version=0,
    category="moe",
    statement=("The dispatch step of a mixture-of-experts layer. x has shape [T, H]; topk_ids (int32, [T, K]) "
               "holds each token's K distinct experts (0 <= id < num_experts = E, a Python int). Return a new "
               "tensor of shape [T * K, H] "
               "in x's dtype whose rows are the token rows x[t], one per (t, j) pair, ordered by expert id "
               "and, within an expert, by the flat index t * K + j (a stable sort of topk_ids.flatten(): "
               "the order is unique, so the output is exact; the row index of pair (t, j) is the index map a "
               "later unpermute uses). An expert may get no row. The shape tuple is (T, H, E, K)."),
    entry_point="moe_token_permute",
    signature=("moe_token_permute(x: Tensor[T, H], topk_ids: Tensor[T, K] (int32), num_experts: int) "
               "-> Tensor[T * K, H]"),
    reference=reference,
    make_inputs=make_inputs,
    distributions=("normal", "uniform", "large", "sparse"),
    workloads={
        # Tiny for the interpreter: 8 experts top-2, 60 top-4 (not a power of two), 20 top-3; H = 24 and 40
        # are not powers of two.
        "cpu": Workload(public=((8, 32, 8, 2), (6, 24, 60, 4)), heldout=((5, 40, 20, 3),),
                        dtypes=("float32", "float16")),
        # Training micro-batches: DeepSeek-V2-Lite (64 experts, top-6, H 2048) over 65536 tokens writes
        # 1.6 GB; DeepSeek-V3 (256, top-8, H 7168) over 16384 tokens 1.9 GB; held out: gpt-oss's unaligned
        # H = 2880 (128 experts, top-4, 4000 tokens: ~115 MB, 24 us) and Mixtral's 8 experts top-2.
        "cuda": Workload(public=((65536, 2048, 64, 6), (16384, 7168, 256, 8)),
                         heldout=((4000, 2880, 128, 4), (32768, 4096, 8, 2)),
                         dtypes=("bfloat16", "float16")),
    },
    # A copy: only the exact rows pass (atol = rtol = 0); the reference gathers the same values in float64.
    tolerances={"float32": Tolerance(0.0, 0.0), "float16": Tolerance(0.0, 0.0), "bfloat16": Tolerance(0.0, 0.0)},
    flops=lambda s: 0,
    # x read once, topk_ids read once, T * K rows written once
    min_bytes=lambda s, d: s[0] * s[1] * itemsize(d) + 4 * s[0] * s[3] + s[0] * s[3] * s[1] * itemsize(d),
    written_bytes=lambda s, d: s[0] * s[3] * s[1] * itemsize(d),
    level=3,
    tags=("moe", "permute", "counting-sort", "scan", "gather", "memory-bound"),
    motivation=("Every MoE layer's token dispatch (Megatron-Core's moe_permute, vLLM's and SGLang's "
                "fused-MoE prologue) groups the routed copies of the tokens by expert so that each expert "
                "runs one contiguous GEMM; it is a counting sort (histogram, scan, scatter) followed by a "
                "row copy at memory bandwidth."),
    solutions=(
        Solution("triton_counting_sort.py", "triton", "optimized",
                 note="a parallel counting sort: per-block expert histograms (one-hot sums), a scan per "
                      "expert over the blocks and one over the experts, then each block ranks its entries "
                      "(one-hot cumsum) and copies their rows to the destinations, H in chunks"),
        Solution("triton_one_program.py", "triton", "slow", defect="too_few_programs",
                 note="the same counting sort run by one program: it walks all T * K entries twice and copies "
                      "every row itself, one SM for gigabytes"),
        Solution("tilelang_counting_sort.py", "tilelang", "optimized",
                 note="a counting sort over chunks of 1024 pairs: a histogram launch (a thread per expert), then "
                      "one launch that ranks each chunk's pairs (totals and earlier-chunk counts per expert, a "
                      "block barrier, a stable walk) and copies the chunk's rows coalesced; lowers to the C "
                      "target, so it runs on the cpu backend"),
    ),
)
