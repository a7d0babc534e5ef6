"""Causal scaled dot-product attention forward, head_dim 128 (decoder prefill / training)."""
import functools

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.reference_parts import attention_in_parts
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize


def reference(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


# v is drawn from "normal" when q and k are "large": with std-30 values, a near-tie of two keys whose v
# entries cancel leaves |o| ~ 0 next to an error of ~u * |v| ~ 1e-2 from rounding P (what torch's own
# flash kernels do), an unfair failure; "large" q and k alone test the max subtraction.
_V_DISTRIBUTION = {"large": "normal"}


def make_inputs(shape, dtype, gen, distribution, device):
    b, h, s, d = shape
    # q and k of std 30 would give scores of std ~900, where float32 round-off in the score alone (~1e-3)
    # moves near-tied softmax weights past any fair tolerance; std 6 keeps 'large' a stress test (scores of
    # std ~36, maxima ~200: exp overflows float32 without the max subtraction, rows nearly one-hot)
    qk_scale = 0.2 if distribution == "large" else 1.0
    q = sample((b, h, s, d), dtype, gen, distribution, device, scale=qk_scale)
    k = sample((b, h, s, d), dtype, gen, distribution, device, scale=qk_scale)
    v = sample((b, h, s, d), dtype, gen, _V_DISTRIBUTION.get(distribution, distribution), device)
    return q, k, v


TASK = TaskSpec(
    name="CausalAttention",
    version=0,
    category="attention",
    statement=("Causal multi-head scaled dot-product attention forward. q, k, v have shape [B, H, S, D] "
               "(contiguous, the same dtype: float16 or bfloat16 on cuda, float32 or float16 on cpu). For every "
               "batch b, head h and query position i: o[i] = sum_{j <= i} softmax_j(q[i] . k[j] * D^-0.5) v[j], "
               "the softmax over the keys j = 0..i only (key j > i gets weight 0; query i always sees key i). "
               "Return a new O of shape [B, H, S, D] in the input dtype. Compute the scores, the softmax and the "
               "P V sum in float32 (P may be rounded to the input dtype before the P V product, as flash "
               "attention does); subtract the running row maximum. The shape tuple is (B, H, S, D)."),
    entry_point="causal_attention",
    signature=("causal_attention(q: Tensor[B, H, S, D], k: Tensor[B, H, S, D], v: Tensor[B, H, S, D]) "
               "-> Tensor[B, H, S, D]"),
    reference=reference,
    # the checker's float64 reference one batch element and a slice of heads at a time (core/reference_parts.py)
    float64_reference=functools.partial(attention_in_parts, reference),
    make_inputs=make_inputs,
    # "normal": scores ~ N(0, 1) (timed); "large" (q, k std 6, v normal): scores with std ~36, exp
    # overflows without the max subtraction and rows are nearly one-hot; "offset" (mean 8): all scores large and positive;
    # "uniform"; "sparse": many exactly tied scores. Row 0 (a single key) and the early rows (few keys,
    # little averaging) make a mis-placed diagonal or an off-by-one in the mask fail at once.
    distributions=("normal", "large", "offset", "uniform", "sparse"),
    workloads={
        # Tiny for the interpreter (the slow solution runs one program per query row): S = 40 and 24 are
        # not multiples of the 16-wide cpu tiles (the diagonal tile is also the masked tail tile).
        "cpu": Workload(public=((1, 2, 32, 16), (1, 1, 40, 32)), heldout=((1, 1, 24, 32),),
                        dtypes=("float32", "float16")),
        # Llama-style prefill / training, head_dim 128: 32 heads (Llama-2/3 7-8B), 40 heads (13B);
        # 0.55-1.1 TFLOP per call (1-3 ms on an H200); held out: S = 3000 (masked tails) and 8192.
        "cuda": Workload(public=((4, 32, 4096, 128), (8, 32, 2048, 128)),
                         heldout=((2, 32, 8192, 128), (4, 40, 3000, 128)),
                         dtypes=("float16", "bfloat16")),
    },
    # The reference is float64 on the same rounded inputs. A float32-accumulating flash kernel errs by
    # (1) float32 round-off in the scores (~1e-4 for 'offset' scores of ~700), (2) P rounded
    # to the input dtype before P V: each weight off by at most u relative (u = 2^-11 fp16, 2^-8 bf16), an
    # output error of at most u * max|v|; in causal attention the first rows average only a few keys, so
    # this worst case is reached there (~2.5e-3 fp16, ~2e-2 bf16 for normal v up to ~5), and (3) one
    # rounding of O to the output dtype (u relative). fp16: atol 5e-3, rtol 5e-3; bf16: atol 3e-2, rtol 2e-2.
    # A mask off by one (a row sees key i+1, or misses key i) changes early rows by O(1). float32 (cpu
    # only, no rounding of P): the score round-off (1) alone, 5e-4.
    tolerances={"float32": Tolerance(5e-4, 5e-4), "float16": Tolerance(5e-3, 5e-3),
                "bfloat16": Tolerance(3e-2, 2e-2)},
    flops=lambda s: 2 * s[0] * s[1] * s[2] * s[2] * s[3],               # half of 4*B*H*S^2*D: causal
    min_bytes=lambda s, d: 4 * s[0] * s[1] * s[2] * s[3] * itemsize(d),  # q, k, v read once, o written once
    level=3,
    tags=("attention", "flash-attention", "causal", "online-softmax"),
    motivation=("Causal self-attention is the prefill and training hot spot of every decoder LLM (Llama, "
                "Mistral, Qwen: head_dim 128); past a few thousand tokens it dominates the layer's FLOPs, and "
                "skipping the masked upper triangle halves them."),
    solutions=(
        Solution("triton_flash.py", "triton", "optimized",
                 note="flash attention forward with causal block skipping: one program per (128-query tile, "
                      "batch*head), an unmasked loop over the key tiles strictly below the diagonal and a masked "
                      "loop over the diagonal tile only; tl.dot with float32 accumulators, online softmax in "
                      "exp2. torch's SDPA uses FlashAttention-2 / cuDNN here: expect E ~0.6-1"),
        Solution("triton_row_per_program.py", "triton", "slow", defect="no_tiling",
                 note="one program per query row walking its keys in 16-key chunks with broadcast multiplies "
                      "and tl.sum (no tl.dot): queries are not tiled, so K/V are re-read by every query row "
                      "(S/2 times per head instead of S/128) and the tensor cores idle"),
    ),
)
