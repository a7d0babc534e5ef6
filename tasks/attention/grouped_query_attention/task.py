"""Causal grouped-query attention forward (GQA): H_q query heads share H_kv key/value heads, head_dim 128."""
import functools

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.reference_parts import attention_in_parts
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize


def reference(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


# v is drawn from "normal" when q and k are "large": with std-30 values, a near-tie of two keys whose v
# entries cancel leaves |o| ~ 0 next to an error of ~u * |v| ~ 1e-2 from rounding P (what torch's own
# flash kernels do), an unfair failure; "large" q and k alone test the max subtraction.
_V_DISTRIBUTION = {"large": "normal"}


def make_inputs(shape, dtype, gen, distribution, device):
    b, hq, hkv, s, d = shape
    # q and k of std 30 would give scores of std ~900, where float32 round-off in the score alone (~1e-3)
    # moves near-tied softmax weights past any fair tolerance; std 6 keeps 'large' a stress test (scores of
    # std ~36, maxima ~200: exp overflows float32 without the max subtraction, rows nearly one-hot)
    qk_scale = 0.2 if distribution == "large" else 1.0
    q = sample((b, hq, s, d), dtype, gen, distribution, device, scale=qk_scale)
    k = sample((b, hkv, s, d), dtype, gen, distribution, device, scale=qk_scale)
    v = sample((b, hkv, s, d), dtype, gen, _V_DISTRIBUTION.get(distribution, distribution), device)
    return q, k, v


TASK = TaskSpec(
    name="GroupedQueryAttention",
    version=0,
    category="attention",
    statement=("Causal grouped-query attention forward. q has shape [B, Hq, S, D]; k and v have shape "
               "[B, Hkv, S, D] with Hq a multiple of Hkv (G = Hq / Hkv query heads per key/value head); all "
               "contiguous, the same dtype (float16 or bfloat16 on cuda, float32 or float16 on cpu). Query head "
               "h attends with key/value head h // G (consecutive query heads share a KV head, as "
               "torch.repeat_interleave(k, G, dim=1) would give). For every b, h and query position i: "
               "o[i] = sum_{j <= i} softmax_j(q[i] . k[j] * D^-0.5) v[j] (causal: key j > i gets weight 0). "
               "Return a new O of shape [B, Hq, S, D] in the input dtype. Compute the scores, the softmax and "
               "the P V sum in float32 (P may be rounded to the input dtype before the P V product); subtract "
               "the running row maximum. Do not materialise repeated K/V. The shape tuple is (B, Hq, Hkv, S, D)."),
    entry_point="grouped_query_attention",
    signature=("grouped_query_attention(q: Tensor[B, Hq, S, D], k: Tensor[B, Hkv, S, D], v: Tensor[B, Hkv, S, D]) "
               "-> Tensor[B, Hq, S, D]"),
    reference=reference,
    # the checker's float64 reference one batch element and a slice of heads at a time (core/reference_parts.py)
    float64_reference=functools.partial(attention_in_parts, reference),
    make_inputs=make_inputs,
    # "normal": scores ~ N(0, 1) (timed); "large" (q, k std 6, v normal): scores with std ~36, exp
    # overflows without the max subtraction, rows nearly one-hot; "offset" (mean 8): all scores large and
    # positive; "uniform"; "sparse": many exactly tied scores. A wrong head mapping (h % Hkv instead of
    # h // G) gives O(1) errors on every head but the first.
    distributions=("normal", "large", "offset", "uniform", "sparse"),
    workloads={
        # Tiny for the interpreter: G = 4 in public, G = 2 held out; S = 40 and 24 are not multiples of the
        # 16-wide cpu tiles.
        "cpu": Workload(public=((1, 4, 1, 32, 16), (1, 8, 2, 40, 32)), heldout=((1, 4, 2, 24, 32),),
                        dtypes=("float32", "float16")),
        # Llama-3 8B (32 query heads, 8 KV heads, head_dim 128) prefill at 4096 and 2048 tokens (0.55 and
        # 0.28 TFLOP); held out: Llama-3 70B's 64/8 heads at 8192 tokens and S = 3000 (masked tails).
        "cuda": Workload(public=((4, 32, 8, 4096, 128), (8, 32, 8, 2048, 128)),
                         heldout=((1, 64, 8, 8192, 128), (3, 32, 8, 3000, 128)),
                         dtypes=("float16", "bfloat16")),
    },
    # The reference is float64 on the same rounded inputs. A float32-accumulating flash kernel errs by
    # (1) float32 round-off in the scores (~1e-4 for 'offset' scores of ~700), (2) P rounded to the input
    # dtype before P V: each weight off by at most u relative (u = 2^-11 fp16, 2^-8 bf16), an output error of
    # at most u * max|v|, reached in the first causal rows that average only a few keys (~2.5e-3 fp16,
    # ~2e-2 bf16 for normal v up to ~5), and (3) one rounding of O to the output dtype (u relative).
    # fp16: atol 5e-3, rtol 5e-3; bf16: atol 3e-2, rtol 2e-2. float32 (cpu only, no rounding of P): the
    # score round-off (1) alone, 5e-4.
    tolerances={"float32": Tolerance(5e-4, 5e-4), "float16": Tolerance(5e-3, 5e-3),
                "bfloat16": Tolerance(3e-2, 2e-2)},
    flops=lambda s: 2 * s[0] * s[1] * s[3] * s[3] * s[4],             # causal: half of 4*B*Hq*S^2*D
    # q read once, k and v read once (Hkv heads, not Hq), o written once
    min_bytes=lambda s, d: (2 * s[0] * s[1] * s[3] * s[4] + 2 * s[0] * s[2] * s[3] * s[4]) * itemsize(d),
    level=3,
    tags=("attention", "flash-attention", "gqa", "causal", "online-softmax"),
    motivation=("Grouped-query attention is what current decoder LLMs run (Llama-3, Mistral, Qwen2/3, Gemma: "
                "4-8 query heads per KV head), shrinking the KV cache; the prefill kernel must map each query "
                "head to its shared KV head without materialising repeated K/V."),
    solutions=(
        Solution("triton_flash.py", "triton", "optimized",
                 note="causal flash attention forward indexing the shared KV head (h // G) directly: one "
                      "program per (128-query tile, batch*query head), unmasked loop below the diagonal and a "
                      "masked diagonal tile, tl.dot with float32 accumulators, online softmax in exp2; programs "
                      "of one KV group run next to each other, so their K/V tiles are served from L2. torch's "
                      "SDPA (enable_gqa) uses FlashAttention-2 here: expect E ~0.6-1"),
        Solution("triton_fp32_dot.py", "triton", "slow", defect="needless_dtype_conversion",
                 note="the same flash kernel, but Q, K, V and P are converted to float32 before each tl.dot "
                      "'for accuracy': on the GPU the dots run as TF32 wgmma at half the fp16/bf16 rate with "
                      "twice the shared memory and registers per tile (fewer stages in flight), and the "
                      "fp32 conversions add ALU work; no accuracy is gained (TF32 keeps 10 mantissa bits, "
                      "what fp16 inputs have)"),
    ),
)
