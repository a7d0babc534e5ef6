"""Fused MoE expert layer: each token through its top-k experts' SwiGLU MLPs, combined by the routing weights."""
import math

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

ZIPF_S = 1.0        # expert popularity ~ 1 / rank^s over a random order of the experts (a few hot ones)
# the weights follow the hidden states' distribution except for "large" (large activations alone)
_W_DISTRIBUTION = {"normal": "normal", "uniform": "uniform", "large": "normal", "sparse": "sparse"}
# epsilon of the intermediates' storage format (a kernel may round gate/up and the activation to the dtype)
_U = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


def _expert_rows(topk_ids):
    """(expert, token indices, slot indices) for each expert that gets a token."""
    for e in torch.unique(topk_ids).tolist():
        tok, slot = torch.where(topk_ids == e)
        yield e, tok, slot


def reference(hidden, topk_ids, topk_weights, w1, w2):
    """HF Mixtral's eager loop over the experts that get tokens: gather, two linears, scatter-add. float64
    inputs (the checker's reference) stay float64 throughout; 16-bit ones run their linears in the input
    dtype (float32 accumulation inside, the activation rounded once to the dtype, as vLLM's fused_moe) and
    the weighted combine in float32."""
    f = hidden.dtype if hidden.dtype in (torch.float64, torch.float32) else torch.float32
    ff = w2.shape[2]
    out = torch.zeros(hidden.shape, dtype=f, device=hidden.device)
    for e, tok, slot in _expert_rows(topk_ids):
        gu = torch.nn.functional.linear(hidden[tok], w1[e])
        act = torch.nn.functional.silu(gu[:, :ff]) * gu[:, ff:]
        y = torch.nn.functional.linear(act, w2[e]).to(f)
        out.index_add_(0, tok, y * topk_weights[tok, slot].to(f)[:, None])
    return out.to(hidden.dtype)


def grouped_mm(hidden, topk_ids, topk_weights, w1, w2):
    """What a user of torch picks instead of the loop: sort the (token, slot) pairs by expert, one
    torch._grouped_mm for every expert's gate/up projection, the SwiGLU, one for the down projection, a
    weighted index_add (torch >= 2.8 on sm90+, bfloat16; float16 where the build has it; raises where it is
    missing: the baseline is then missing and the reward uses eager)."""
    t, k = topk_ids.shape
    ff = w2.shape[2]
    flat = topk_ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    offs = torch.cumsum(torch.bincount(flat, minlength=w1.shape[0]), 0).to(torch.int32)
    tok = order // k
    gu = torch._grouped_mm(hidden[tok], w1.transpose(-2, -1), offs=offs)
    act = torch.nn.functional.silu(gu[:, :ff]) * gu[:, ff:]
    y = torch._grouped_mm(act, w2.transpose(-2, -1), offs=offs)
    out = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
    out.index_add_(0, tok, y.float() * topk_weights.reshape(-1)[order].float()[:, None])
    return out.to(hidden.dtype)


def empty_experts(e: int) -> int:
    """Experts that get no token (at every distribution): one in eight, as in GroupedGemm, so that min_bytes
    counts exactly the expert weights that must be read."""
    return 0 if e <= 2 else max(1, e // 8)


def routing(t: int, e: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """[t, k] int32: k distinct experts per token (tie-free: the routing is an input, not a top-k to break),
    drawn on the host with a Zipf-like popularity over a random order of the experts, the first
    empty_experts(e) of that order never picked. Every other expert gets at least one pair: where chance gave
    it none, one pair of the most loaded expert is moved to it (no token holds it yet, so the k stay
    distinct; the workloads keep T * K >= 2 (E - empty) so the donor keeps a pair)."""
    n_empty = empty_experts(e)
    order = torch.randperm(e, generator=gen)
    probs = torch.zeros(e)
    probs[order[n_empty:]] = 1.0 / torch.arange(1, e - n_empty + 1, dtype=torch.float32) ** ZIPF_S
    ids = torch.multinomial(probs.expand(t, e), k, replacement=False, generator=gen)
    counts = torch.bincount(ids.reshape(-1), minlength=e)
    for x in order[n_empty:].tolist():
        if counts[x] == 0:
            donor = int(counts.argmax())
            pos = int(torch.nonzero(ids.reshape(-1) == donor)[0])
            ids.view(-1)[pos] = x
            counts[donor] -= 1
            counts[x] = 1
    return ids.to(torch.int32)


def make_inputs(shape, dtype, gen, distribution, device):
    t, d, f, e, k = shape
    # the routing from a seed taken from the trial's generator (child and checker draw the same), drawn on
    # the host, then moved
    seed = int(torch.randint(0, 2 ** 62, (1,), generator=gen, device=device))
    ids = routing(t, e, k, torch.Generator().manual_seed(seed)).to(device)
    # routing weights: a softmax over each token's k logits (float32, positive, summing to one)
    weights = torch.softmax(torch.randn((t, k), generator=gen, device=device), dim=-1)
    hidden = sample((t, d), dtype, gen, distribution, device)
    # 1/sqrt(fan-in) keeps gate, up and the output of order one for normal inputs; "large" (std 30) gives
    # activations ~ 900 and outputs in the hundreds, inside float16's range
    w1 = sample((e, 2 * f, d), dtype, gen, _W_DISTRIBUTION[distribution], device, scale=1.0 / math.sqrt(d))
    w2 = sample((e, d, f), dtype, gen, _W_DISTRIBUTION[distribution], device, scale=1.0 / math.sqrt(f))
    return hidden, ids, weights, w1, w2


def error_bound(ins, dtype):
    """vLLM's fused_moe stores the gate/up projection and the activation in the input dtype: three roundings
    per activation a_f = silu(g_f) u_f, each within u/2 relative (u the dtype's epsilon), the gate's
    amplified by silu's log-derivative |1 + g (1 - sigmoid(g))| (exact per element: large only where g is
    very negative and a_f is tiny), so a_f errs by r_f = (u/2) (2 + amp(g_f)) + 2^-24 (sqrt(D) + sqrt(F))
    (the float32 sums of both projections) relative. The down projection's y_d = sum_f w2[d, f] a_f then
    errs by a sum of independent roundings; the bound is 4 sqrt(sum_f (w2[d, f] a_f r_f)^2), weighted by each
    token's routing weights: a rounding within +-u/2 has standard deviation u/sqrt(12), so that is at least
    6.9 standard deviations (r_f adds the three roundings linearly, not in quadrature). It holds an output
    near zero by cancellation, which rtol |y| cannot."""
    hidden, topk_ids, topk_weights, w1, w2 = ins
    ff = w2.shape[2]
    acc = 2.0 ** -24 * (math.sqrt(hidden.shape[1]) + math.sqrt(ff))
    bound = torch.zeros(hidden.shape, dtype=torch.float64, device=hidden.device)
    for e, tok, slot in _expert_rows(topk_ids):
        gu = hidden[tok] @ w1[e].T
        g = gu[:, :ff]
        act = torch.nn.functional.silu(g) * gu[:, ff:]
        amp = (1 + g * (1 - torch.sigmoid(g))).abs()
        rel = _U[dtype] / 2 * (2 + amp) + acc
        spread = (act * rel) ** 2 @ (w2[e] * w2[e]).T
        bound.index_add_(0, tok, spread.sqrt() * topk_weights[tok, slot][:, None])
    return 4 * bound


def min_bytes(s, d):
    """hidden read once, the routing (ids and weights) read once, the gate/up and down weights of the experts
    that get tokens (all but empty_experts(E)) read once, the output written once."""
    t, dd, f, e, k = s
    return (2 * t * dd + (e - empty_experts(e)) * 3 * dd * f) * itemsize(d) + 8 * t * k


TASK = TaskSpec(
    name="FusedMoe",
    version=0,
    category="moe",
    statement=("A mixture-of-experts layer's experts, routing given. hidden [T, D]; topk_ids (int32, [T, K]) "
               "holds each token's K distinct experts (0 <= id < E) and topk_weights (float32, [T, K]) their "
               "routing weights; w1 [E, 2F, D] holds each expert's gate (rows 0..F-1) and up (rows F..2F-1) "
               "projections, w2 [E, D, F] its down projection. Return a new tensor of shape [T, D] in "
               "hidden's dtype: y[t] = sum_j topk_weights[t, j] * w2[e] @ (silu(g) * u) with e = "
               "topk_ids[t, j], g = w1[e, :F] @ hidden[t], u = w1[e, F:] @ hidden[t], every product summed "
               "in float32 (g, u and the activation silu(g) * u may each be rounded once to hidden's dtype, "
               "as vLLM's fused_moe stores them), the sum over j rounded once at the end. hidden, w1, w2 are "
               "contiguous and of one dtype: float16 or bfloat16 (float32 and float16 on the cpu backend). "
               "Some experts get no token. topk_ids stays on the device: reading it on the host costs a "
               "synchronisation. The shape tuple is (T, D, F, E, K)."),
    entry_point="fused_moe",
    signature=("fused_moe(hidden: Tensor[T, D], topk_ids: Tensor[T, K] (int32), topk_weights: Tensor[T, K] "
               "(float32), w1: Tensor[E, 2F, D], w2: Tensor[E, D, F]) -> Tensor[T, D]"),
    reference=reference,
    make_inputs=make_inputs,
    distributions=("normal", "uniform", "large", "sparse"),
    timed_distribution="normal",
    workloads={
        # Tiny for the interpreter: 4, 8 and 6 experts (one empty), top-2 / top-3, D and F off the block
        # multiples (24, 36, 40, 20).
        "cpu": Workload(public=((12, 32, 24, 4, 2), (10, 40, 20, 8, 2)), heldout=((9, 24, 36, 6, 3),),
                        dtypes=("float32", "float16")),
        # Prefill / training batches: Mixtral-8x7B (8 experts top-2, 4096 -> 14336) over 4096 tokens, 2.9
        # TFLOP; DeepSeek-V2-Lite (64 top-6, 2048 -> 1408) over 8192 tokens, 0.85 TFLOP; held out:
        # Qwen3-30B-A3B (128 top-8, 2048 -> 768, 4096 tokens, 0.31 TFLOP: many small experts) and gpt-oss-20b's
        # sizes (32 top-4, 2880 -> 2880) over 3000 tokens (not a multiple of 16: a masked row tail), 0.6 TFLOP.
        "cuda": Workload(public=((4096, 4096, 14336, 8, 2), (8192, 2048, 1408, 64, 6)),
                         heldout=((4096, 2048, 768, 128, 8), (3000, 2880, 2880, 32, 4)),
                         dtypes=("bfloat16", "float16")),
    },
    # As GroupedGemm's: float32-accumulated dot products, one rounding of the output to its dtype (u = 2^-11
    # fp16, 2^-8 bf16): rtol 4u, atol a few u of the order-one output. The intermediates' optional rounding
    # to the dtype is a relative error of ~u per term of the down projection, which an output element near
    # zero by cancellation cannot absorb in rtol |y|: error_bound adds it, per element. A token sent to a
    # wrong expert, a dropped weight or slot, or a missing SiLU is off by O(|y|) and fails.
    tolerances={"float32": Tolerance(1e-4, 1e-4), "float16": Tolerance(1e-3, 2e-3),
                "bfloat16": Tolerance(8e-3, 1.6e-2)},
    error_bound=error_bound,
    # the three projections' multiply-adds of every routed (token, expert) pair
    flops=lambda s: 6 * s[0] * s[4] * s[1] * s[2],
    min_bytes=min_bytes,
    written_bytes=lambda s, d: s[0] * s[1] * itemsize(d),
    # E against one torch._grouped_mm per projection: eager is a Python loop of 2 linears per expert with a
    # host synchronisation (torch.unique), which no MoE server ships
    e_baseline="grouped_mm",
    alternatives={"grouped_mm": grouped_mm},
    level=3,
    tags=("moe", "gemm", "grouped", "tensor-cores", "gated-mlp", "fused-activation", "ragged"),
    motivation=("The expert computation of every MoE model (Mixtral, DeepSeek-V2/V3, Qwen3-MoE, gpt-oss) is "
                "most of its FLOPs; vLLM's and SGLang's fused_moe Triton kernels sort the routed tokens by "
                "expert and run grouped GEMMs with the gather and the SwiGLU fused, instead of a Python loop "
                "over the experts."),
    solutions=(
        Solution("triton_sorted_grouped.py", "triton", "optimized",
                 note="a counting sort of the (token, slot) pairs by expert on the device, then two grouped "
                      "GEMMs in one launch each (tiles mapped to experts by walking the group ends): the first "
                      "gathers the token rows and keeps gate and up accumulators side by side, storing "
                      "silu(g) * u; the second multiplies by the routing weight; a last pass sums each "
                      "token's K rows in slot order"),
        Solution("triton_per_token.py", "triton", "slow", defect="no_tiling",
                 note="one program per (token, slot) pair computes its activation as matrix-vector products, "
                      "then one per token its output: every expert weight is read once per routed token "
                      "instead of once per tile of tokens, and no tensor cores"),
        Solution("tilelang_sorted_grouped.py", "tilelang", "optimized", cpu_status="unverified",
                 note="a chunked counting sort of the pairs into expert runs padded to the 64-row block (plain "
                      "registers, as MoeAlignBlockSize's), then two grouped T.gemm GEMMs whose row blocks each "
                      "belong to one expert: gate and up side by side with the token rows gathered into shared "
                      "memory and silu(g) * u stored, then the down projection scaled by the routing weight into "
                      "a float32 per-pair buffer; a combine sums each token's K rows in slot order; GPU-style, "
                      "so the cpu backend only compiles it (sm_90a)"),
    ),
)
