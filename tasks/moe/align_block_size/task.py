"""MoE align-block-size: the routed (token, slot) pairs sorted by expert, each expert's run padded to a block."""
import torch

from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload

ZIPF_S = 1.0


def reference(topk_ids, num_experts, block_size):
    flat = topk_ids.reshape(-1).long()
    n = flat.numel()
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    offs = torch.zeros(num_experts + 1, dtype=torch.long, device=flat.device)
    offs[1:] = torch.cumsum(padded, 0)
    out = torch.full((num_experts + 1 + n + num_experts * (block_size - 1),), n, dtype=torch.int32,
                     device=flat.device)
    out[:num_experts + 1] = offs.to(torch.int32)
    order = torch.sort(flat, stable=True).indices                # flat indices, stable within an expert
    starts = torch.cumsum(counts, 0) - counts                    # unpadded starts
    e_sorted = flat[order]
    rank = torch.arange(n, device=flat.device) - starts[e_sorted]
    out[num_experts + 1 + offs[e_sorted] + rank] = order.to(torch.int32)
    return out


def make_inputs(shape, dtype, gen, distribution, device):
    t, e, k, block = shape
    # Zipf-like expert popularity over a random order of the experts; "sparse" routes every token among
    # only the first quarter of that order (most experts empty: zero-length runs); drawn on the host from a
    # seed of the trial's generator
    seed = int(torch.randint(0, 2 ** 62, (1,), generator=gen, device=device))
    host = torch.Generator().manual_seed(seed)
    order = torch.randperm(e, generator=host)
    probs = torch.zeros(e)
    live = order if distribution != "sparse" else order[:max(k, e // 4)]
    probs[live] = 1.0 / torch.arange(1, live.numel() + 1, dtype=torch.float32) ** ZIPF_S
    ids = torch.multinomial(probs.expand(t, e), k, replacement=False, generator=host).to(torch.int32)
    return ids.to(device), e, block


def out_len(s) -> int:
    t, e, k, block = s
    return e + 1 + t * k + e * (block - 1)


TASK = TaskSpec(
    name="MoeAlignBlockSize",
    version=0,
    category="moe",
    statement=("The sort step of a fused-MoE GEMM (vLLM's moe_align_block_size). topk_ids (int32, [T, K]) holds "
               "each token's K distinct experts (0 <= id < num_experts = E); block_size (B) is the GEMM's row "
               "block; both E and B are Python ints. Let n = T * K and c_e the number of pairs routed to expert "
               "e, padded up to p_e = ceil(c_e / B) * B. Return ONE new int32 tensor of length "
               "E + 1 + n + E * (B - 1): entries 0..E hold the padded offsets (0, p_0, p_0 + p_1, ..., total); "
               "then, from entry E + 1 on, each expert's run of p_e entries starting at its offset: the flat "
               "indices t * K + j of its pairs in increasing order, then the sentinel n for the padding; every "
               "entry past the total is the sentinel n as well. The order is unique; compared exactly. The "
               "shape tuple is (T, E, K, B); the inputs hold no floating-point tensor (the listed dtype names "
               "none)."),
    entry_point="moe_align_block_size",
    signature=("moe_align_block_size(topk_ids: Tensor[T, K] (int32), num_experts: int, block_size: int) "
               "-> Tensor[E + 1 + T * K + E * (B - 1)] (int32)"),
    reference=reference,
    make_inputs=make_inputs,
    reference_in_float64=False,
    output_dtype=lambda dtype: "int32",
    # "normal": Zipf-like popularity over all experts; "sparse": only a quarter of the experts get tokens,
    # so most runs are empty (zero padded length) and the scan must carry zeros.
    distributions=("normal", "sparse"),
    workloads={
        # Tiny for the interpreter: 8 experts top-2 with 4-row blocks, 60 top-4 with 16-row blocks (most runs
        # padded), 20 top-3 with 8-row blocks.
        "cpu": Workload(public=((8, 8, 2, 4), (6, 60, 4, 16)), heldout=((5, 20, 3, 8),),
                        dtypes=("float32",)),
        # An index kernel moves little: the cuda shapes are the dispatch of very large batches (2M tokens
        # top-8 of 128 experts, 3M top-6 of 64: 134-151 MB of ids and output; a floor >= 20 us at 4.8 TB/s is
        # only reached there); held out: 60 experts (unaligned, 32-row blocks, 4M tokens top-4) and Mixtral's
        # top-2 of 8 with 128-row blocks over 8M tokens.
        "cuda": Workload(public=((2097152, 128, 8, 64), (3145728, 64, 6, 64)),
                         heldout=((4000000, 60, 4, 32), (8000000, 8, 2, 128)),
                         dtypes=("float32",)),
    },
    tolerances={"float32": Tolerance(0.0, 0.0)},            # indices: exact
    flops=lambda s: 0,
    min_bytes=lambda s, d: 4 * s[0] * s[2] + 4 * out_len(s),           # ids read once, the output written
    written_bytes=lambda s, d: 4 * out_len(s),
    level=3,
    tags=("moe", "sort", "counting-sort", "scan", "index", "padding"),
    motivation=("vLLM's and SGLang's fused-MoE GEMM (and Triton's own MoE example) start with this kernel: "
                "it groups the routed pairs by expert and pads each expert's run to the GEMM's block, so that "
                "every row block of the grouped GEMM belongs to one expert; a histogram, a padded scan and a "
                "stable scatter."),
    solutions=(
        Solution("triton_counting_sort.py", "triton", "optimized",
                 note="block histograms (one-hot sums), a scan per expert over the blocks and a padded scan "
                      "over the experts, a sentinel fill, then each block ranks its pairs (one-hot cumsum) "
                      "and scatters their flat indices"),
        Solution("triton_one_program.py", "triton", "slow", defect="too_few_programs",
                 note="the same counting sort, fill and scatter run by a single program over all T * K pairs"),
        Solution("tilelang_counting_sort.py", "tilelang", "optimized",
                 note="a counting sort over chunks of 1024 pairs: a histogram launch (a thread per expert), then "
                      "one launch that ranks each chunk's pairs into their padded runs (a block barrier, a "
                      "stable walk); block 0 writes the offsets, the padding and the sentinel tail; lowers to "
                      "the C target, so it runs on the cpu backend"),
    ),
)
