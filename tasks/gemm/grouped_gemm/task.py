"""MoE grouped GEMM: tokens sorted by expert, each expert's rows times that expert's own weight."""
import math

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

# as in Matmul: the weights follow x's distribution except for "large" (large x alone)
_W_DISTRIBUTION = {"normal": "normal", "uniform": "uniform", "offset": "offset", "sparse": "sparse",
                   "large": "normal"}


def reference(x, weight, offsets):
    ends = offsets.tolist()
    sizes = [e - s for s, e in zip([0] + ends[:-1], ends)]
    return torch.cat([torch.nn.functional.linear(xs, w) for xs, w in zip(x.split(sizes), weight)])


def grouped_mm(x, weight, offsets):
    """torch._grouped_mm: every group's GEMM in one launch, what a user of torch picks for MoE experts (the
    reference is a Python loop of one linear per group). torch >= 2.8 on sm90+, bfloat16 (float16 where the
    build has it); raises where it is missing: the baseline is then missing and the reward uses eager."""
    return torch._grouped_mm(x, weight.transpose(-2, -1), offs=offsets.to(torch.int32))


ZIPF_S = 1.0        # expert popularity ~ 1 / rank^s: a few hot experts, a long tail, as MoE routers give


def top_k(g: int) -> int:
    """Experts per token: Mixtral's top-2 for 8 experts, DeepSeek-V2-Lite's top-6 for 64, Qwen3-MoE's top-8
    for 128 (the cuda shapes' models); the cpu shapes' 2-8 experts route top-1 or top-2."""
    return 1 if g <= 2 else 2 if g <= 16 else 6 if g <= 64 else 8


def empty_experts(g: int) -> int:
    """Experts that get no token (at every distribution): one in eight (1 of 8, 8 of 64, 16 of 128; 1 of 3 or
    4 on the cpu shapes). A fixed count, so that min_bytes counts exactly the weights that must be read."""
    return 0 if g <= 2 else max(1, g // 8)


def group_sizes(g: int, t: int, gen) -> torch.Tensor:
    """Rows per expert (int64, on the cpu): top-k routing of ceil(t / k) tokens, each to k distinct experts
    drawn by a Zipf-like popularity over a random order of the experts, the first `empty_experts(g)` of that
    order left out; the first t picks kept. Every routed expert gets at least one row (one is moved from the
    largest group if chance gave it none): min_bytes counts its weight."""
    n_empty = empty_experts(g)
    order = torch.randperm(g, generator=gen)
    probs = torch.zeros(g)
    probs[order[n_empty:]] = 1.0 / torch.arange(1, g - n_empty + 1, dtype=torch.float32) ** ZIPF_S
    k = min(top_k(g), g - n_empty)
    tokens = -(-t // k)
    picks = torch.multinomial(probs.expand(tokens, g), k, replacement=False, generator=gen)
    counts = torch.bincount(picks.reshape(-1)[:t], minlength=g)
    for e in order[n_empty:].tolist():
        if counts[e] == 0:
            counts[int(counts.argmax())] -= 1
            counts[e] = 1
    return counts


def make_inputs(shape, dtype, gen, distribution, device):
    g, t, n, k = shape
    # The routing (group sizes) from the trial's generator, drawn on the host (a seed taken from the
    # device's generator: child and checker draw the same), then the tensors on the device.
    seed = int(torch.randint(0, 2 ** 62, (1,), generator=gen, device=device))
    counts = group_sizes(g, t, torch.Generator().manual_seed(seed))
    offsets = torch.cumsum(counts, 0).to(torch.int32).to(device)
    x = sample((t, k), dtype, gen, distribution, device)
    # 1/sqrt(K) keeps y of order one for normal inputs; "offset" gives y ~ 64 sqrt(K) (~7700 at K = 14336,
    # inside float16's range) so that a float16 accumulator or a dropped K tile fails by far.
    weight = sample((g, n, k), dtype, gen, _W_DISTRIBUTION[distribution], device, scale=1.0 / math.sqrt(k))
    return x, weight, offsets


def min_bytes(s, d):
    """x read once, the weights of the experts that get tokens (all but empty_experts(G)) read once, y
    written once, the offsets read."""
    g, t, n, k = s
    return (t * k + (g - empty_experts(g)) * n * k + t * n) * itemsize(d) + 4 * g


TASK = TaskSpec(
    name="GroupedGemm",
    version=2,
    e_baseline="grouped_mm",
    alternatives={"grouped_mm": grouped_mm},
    changelog=("v1: realistic routing and exact min_bytes. Rows go to experts by top-k routing (top-2 for 8 "
               "experts, top-6 for 64, top-8 for 128) with a Zipf-like popularity from the seed, and one expert "
               "in eight gets no token on every distribution (v0: top-1 by noisy logits, empty experts only "
               "off the timed distribution); min_bytes counts only the weights of experts that get tokens "
               "(v0 counted all G, so its memory floor was too high on the 64- and 128-expert shapes and "
               "could call an honest kernel faster_than_floor). v0's timings are not comparable.",
               "v2: the reward's E is taken against torch._grouped_mm (e_baseline 'grouped_mm'), one launch for all groups, not the reference's Python loop of one linear per group (issue 34); where the build lacks it the reward falls back to eager and flags it",),
    category="gemm",
    statement=("The grouped GEMM of a mixture-of-experts layer. x of shape [T, K] holds T token rows sorted by "
               "expert; weight of shape [G, N, K] holds each expert's nn.Linear weight; offsets (int32, shape "
               "[G], non-decreasing, offsets[G-1] = T) gives each group's end: expert g owns rows "
               "offsets[g-1] .. offsets[g]-1 (from 0 for g = 0), and a group may be empty. Return a new y of "
               "shape [T, N] with y[r] = x[r] @ weight[g]^T for the expert g that owns row r, accumulated in "
               "float32 and rounded once to the input dtype. x and weight are contiguous and of one dtype: "
               "float16 or bfloat16 (float32 and float16 on the cpu backend). offsets stays on the device: "
               "reading it on the host costs a synchronisation. The shape tuple is (G, T, N, K)."),
    entry_point="grouped_gemm",
    signature="grouped_gemm(x: Tensor[T, K], weight: Tensor[G, N, K], offsets: Tensor[G] int32) -> Tensor[T, N]",
    reference=reference,
    make_inputs=make_inputs,
    distributions=("normal", "offset", "uniform", "large", "sparse"),
    timed_distribution="normal",
    workloads={
        # Tiny for the interpreter: 2-8 experts, a few to a few hundred rows each (empty ones on the stress
        # distributions), N and K off the block multiples; T = 1100 over 2 experts makes the optimized
        # solution pick its large-group (128-row) tiles, the others its 64-row ones.
        "cpu": Workload(public=((4, 100, 48, 40), (3, 200, 72, 80)), heldout=((8, 150, 40, 96), (2, 1100, 24, 40)),
                        dtypes=("float32", "float16")),
        # Mixtral-8x7B's w1 (4096 -> 14336) and w2 (14336 -> 4096) over 4096 tokens x top-2 = 8192 rows;
        # DeepSeek-V2-Lite (64 experts, 2048 -> 1408, 16384 rows) and Qwen3-30B-A3B (128 experts,
        # 2048 -> 768, 4096 tokens x top-8 = 32768 rows). 0.1-1 TFLOP each.
        "cuda": Workload(public=((8, 8192, 14336, 4096), (64, 16384, 1408, 2048)),
                         heldout=((8, 8192, 4096, 14336), (128, 32768, 768, 2048)),
                         dtypes=("bfloat16", "float16")),
    },
    # As Matmul's: each output row is one float32-accumulated dot product per column (~2^-24 sqrt(K / 6) |y|
    # against the float64 reference), then one rounding to the output dtype (u = 2^-11 fp16, 2^-8 bf16):
    # rtol = 4u. A row multiplied by a neighbouring expert's weight is off by O(|y|) and fails.
    tolerances={"float32": Tolerance(1e-4, 1e-4), "float16": Tolerance(1e-3, 2e-3),
                "bfloat16": Tolerance(8e-3, 1.6e-2)},
    flops=lambda s: 2 * s[1] * s[2] * s[3],
    min_bytes=min_bytes,
    written_bytes=lambda s, d: s[1] * s[2] * itemsize(d),
    level=3,
    tags=("gemm", "grouped", "moe", "tensor-cores", "ragged"),
    motivation=("Every mixture-of-experts layer (Mixtral, DeepSeek-V2/V3, Qwen3-MoE) multiplies each "
                "expert's tokens by that expert's weights; one grouped kernel over ragged groups replaces "
                "G small GEMM launches and a host synchronisation to read the group sizes."),
    solutions=(
        Solution("triton_tile_schedule.py", "triton", "optimized",
                 note="one launch for all experts: each program maps its tile-row index to (expert, row "
                      "block) by walking the G offsets on the device (no host sync, empty groups skipped), "
                      "then a 128x128x64 (or 64x128x64 for small groups) tl.dot tile with a float32 "
                      "accumulator, grouped program order for L2 reuse of the expert weight"),
        Solution("triton_expert_walk.py", "triton", "slow", defect="too_few_programs",
                 note="one program per 128-column tile of the output, walking every expert and every row "
                      "block in sequence: N / 128 programs (6 for N = 768, 112 for N = 14336) on 132 SMs"),
    ),
)
