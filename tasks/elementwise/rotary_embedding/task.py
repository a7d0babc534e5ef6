"""Rotary position embedding (RoPE, the Llama / GPT-NeoX 'rotate_half' layout) applied to a query tensor."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

ROPE_THETA = 10000.0
MAX_POSITION = 8192


def reference(q, cos, sin):
    # Hugging Face's apply_rotary_pos_emb with half-width tables: q * cos + rotate_half(q) * sin.
    half = q.shape[-1] // 2
    c = torch.cat((cos, cos), dim=-1)[:, None, :]
    s = torch.cat((sin, sin), dim=-1)[:, None, :]
    rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
    return q * c + rotated * s


def make_inputs(shape, dtype, gen, distribution, device):
    t, h, d = shape
    q = sample((t, h, d), dtype, gen, distribution, device)
    # Each token at a random position in a long context (as in batched prefill/decode); the tables are the
    # model's: angle = position * theta^(-2i/d), computed in float32 and rounded to the model dtype.
    pos = torch.randint(0, MAX_POSITION, (t,), generator=gen, device=device).to(torch.float32)
    inv_freq = ROPE_THETA ** (-torch.arange(0, d, 2, device=device, dtype=torch.float32) / d)
    angles = pos[:, None] * inv_freq[None, :]
    cos = angles.cos().to(getattr(torch, dtype))
    sin = angles.sin().to(getattr(torch, dtype))
    return q, cos, sin


TASK = TaskSpec(
    name="RotaryEmbedding",
    version=1,
    e_baseline="torch.compile",   # eager is an unfused chain of ops (TaskSpec.e_baseline)
    changelog=("v1: the reward's E is taken against torch.compile of the reference (e_baseline): eager runs it as an unfused chain of ops that a fused kernel beats 10x, where E sat at the reward's ceiling (issue 34)",),
    category="elementwise",
    statement=("Apply rotary position embeddings (the Llama / GPT-NeoX 'rotate_half' layout, not the interleaved "
               "GPT-J one) to q of shape [T, H, D] (tokens, heads, head_dim; D even), with per-token tables "
               "cos and sin of shape [T, D/2] in q's dtype. For every token t, head h and i < D/2: "
               "out[t, h, i] = q[t, h, i] * cos[t, i] - q[t, h, i + D/2] * sin[t, i] and "
               "out[t, h, i + D/2] = q[t, h, i + D/2] * cos[t, i] + q[t, h, i] * sin[t, i]. "
               "Return a new tensor of q's shape and dtype (q is not modified); compute in float32 and round "
               "once. The task shape is (T, H, D)."),
    entry_point="rotary_embedding",
    signature="rotary_embedding(q: Tensor[T, H, D], cos: Tensor[T, D/2], sin: Tensor[T, D/2]) -> Tensor[T, H, D]",
    reference=reference,
    make_inputs=make_inputs,
    # Five distributions (coprime with the 2 dtypes x 2 seeds of each shape). "large" (std 30: the
    # massive-activation outliers of real queries) and "offset" (mean 8) make q1 * cos - q2 * sin cancel
    # to a small result from large products: a float16 computation loses it, float32 keeps it.
    distributions=("normal", "large", "uniform", "offset", "sparse"),
    workloads={
        # (T, H, D). D = 96 gives a half-width of 48 (masked); 3 and 5 heads are not powers of two. Tiny:
        # the slow solution runs T * H interpreted programs of D/2 scalar steps each.
        "cpu": Workload(public=((8, 4, 64), (6, 3, 96)), heldout=((3, 5, 128),), dtypes=("float32", "float16")),
        # Prefill-sized token batches: Llama-2/3-8B queries (32 x 128), Llama-3.2-1B-style (32 x 64),
        # Llama-2-13B (40 x 128), and GQA keys of Llama-3-8B (8 x 128): 0.13-0.27 GB moved per call.
        "cuda": Workload(public=((16384, 32, 128), (32768, 32, 64)), heldout=((10000, 40, 128), (32768, 8, 128)),
                         dtypes=("bfloat16", "float16")),
    },
    # The reference runs in float64 on the same rounded inputs and tables. float32: two products and an
    # add, each rounded (without FMA: up to ~1 ulp of the larger product, 1.5e-5 for |q| ~ 150 with the
    # "large" inputs), so where the result cancels only an absolute bound holds: 5e-5; elsewhere 1e-5
    # relative. float16/bfloat16: the products of two float16 values are exact in float32, so one rounding
    # of the output dominates (half an ulp: 4.9e-4 / 3.9e-3 relative).
    tolerances={"float32": Tolerance(5e-5, 1e-5), "float16": Tolerance(1e-3, 1e-3),
                "bfloat16": Tolerance(1e-2, 1e-2)},
    # Two multiplies and one add per output element.
    flops=lambda s: 3 * s[0] * s[1] * s[2],
    # q read once and written once, cos and sin ([T, D/2] each) read once.
    min_bytes=lambda s, d: (2 * s[0] * s[1] * s[2] + s[0] * s[2]) * itemsize(d),
    level=2,
    tags=("rope", "positional-encoding", "attention-prologue", "memory-bound", "broadcast"),
    motivation=("Every Llama, Mistral, Qwen and GPT-NeoX attention layer rotates q and k by position before the "
                "attention kernel, on every token; done with HF's rotate_half it takes ~6 elementwise passes, "
                "so vLLM, SGLang and flash-attn ship fused rotary kernels that read q once and share each "
                "token's cos/sin row across all heads."),
    solutions=(
        Solution("triton_token_heads.py", "triton", "optimized",
                 note="one program per (token, block of heads): the token's cos/sin rows loaded once and "
                      "broadcast over the heads, both halves of each head loaded as contiguous vectors, "
                      "float32 math, masked half-width and head tails"),
        Solution("triton_scalar_pairs.py", "triton", "slow", defect="scalar_loop",
                 note="one program per (token, head) rotating its D/2 pairs one at a time with scalar loads "
                      "and stores"),
        Solution("tilelang_token_heads.py", "tilelang", "optimized",
                 note="one thread block per (token, 8 heads), T.Parallel over the [8, D/2] rotation pairs, "
                      "float32 math, guarded head tail"),
    ),
)
