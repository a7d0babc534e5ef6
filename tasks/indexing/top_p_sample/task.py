"""Top-p (nucleus) sampling of one token per row of logits [B, V], with the uniform draws given as an input."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

EPS32 = 2.0 ** -24          # float32's unit roundoff


def _order(logits):
    """The sampling order: logits descending, equal logits by the lower token id (a stable descending sort of
    the logits themselves, which temperature > 0 does not reorder)."""
    return torch.sort(logits, dim=-1, descending=True, stable=True).indices


def reference(logits, temperature, top_p, u):
    v = logits.shape[-1]
    probs = torch.softmax(logits.float() / temperature[:, None], dim=-1)
    order = _order(logits)
    c = probs.gather(-1, order).cumsum(-1)
    # the nucleus: the first k + 1 tokens in order, k the first position whose cumulative mass reaches top_p
    # (c is non-decreasing, so counting c < top_p finds it); all V if rounding keeps c below top_p
    k = (c < top_p[:, None]).sum(-1, keepdim=True).clamp(max=v - 1)
    # inverse CDF within the nucleus renormalized to 1: the first position whose mass exceeds u * c[k]
    j = (c <= u[:, None] * c.gather(-1, k)).sum(-1, keepdim=True).clamp(max=k)
    return order.gather(-1, j).squeeze(-1)


def make_inputs(shape, dtype, gen, distribution, device):
    b, v = shape
    logits = sample((b, v), dtype, gen, distribution, device)
    if distribution == "uniform":
        # 9 levels in [-4, 4]: thousands of equal logits per row, so the id tie-break decides the order
        logits = (logits.float() * 4).round().to(logits.dtype)
    kw = dict(generator=gen, device=device, dtype=torch.float32)
    temperature = 0.6 + 0.8 * torch.rand((b,), **kw)       # [0.6, 1.4): the range serving requests use
    top_p = 0.5 + 0.49 * torch.rand((b,), **kw)            # [0.5, 0.99): 0.9-0.95 typical
    u = torch.rand((b,), **kw)                             # [0, 1): one draw per row
    return logits, temperature, top_p, u


def _window(logits, temperature, top_p, u):
    """Per row, in float64: the sampling order, the exact pick's position j and the positions [lo, hi] a correct
    float32 kernel may reach."""
    v = logits.shape[-1]
    order = _order(logits)
    z = logits.double() / temperature.double()[:, None]
    c = torch.softmax(z, dim=-1).gather(-1, order).cumsum(-1)
    # d bounds |c32 - c| for a float32 kernel, relative to the total mass 1: the cumulative sum of up to V
    # positive terms in any order errs by at most (V - 1) eps (Higham's worst case, Accuracy and Stability 4.2:
    # a tree or blocked sum does far better, but the rule must admit a sequential one); exp(z - max) of a
    # float32 z = logit / T errs by ~(|z| + |max| + |z - max| + 2) eps relative, at most 4 |z|max + 2; the
    # normalisation (or comparing against top_p * Z instead) adds a few more.
    d = (EPS32 * (v + 4 * z.abs().amax(-1) + 16))[:, None]
    p, uu = top_p.double()[:, None], u.double()[:, None]

    def first(cond):
        return cond.sum(-1, keepdim=True).clamp(max=v - 1)

    k, k_lo, k_hi = first(c < p), first(c < p - d), first(c < p + d)
    # the pick compares c32 (off by d) with u * c32[k'] (off by u d < d): 2 d either way
    j = first(c <= uu * c.gather(-1, k)).clamp(max=k)
    lo = first(c <= uu * c.gather(-1, k_lo) - 2 * d).clamp(max=k_lo)
    hi = first(c <= uu * c.gather(-1, k_hi) + 2 * d).clamp(max=k_hi)
    return order, j, lo, hi


def output_view(inputs, idx):
    """The sample's token is compared through its position in the sampling order (logits descending, ties to
    the lower id). In float64 the rule picks one position j; a float32 kernel's cumulative sums may land on
    the other side of top_p or of u * (nucleus mass) when the exact sums lie within d of them (d: the float32
    error bound in _window, (V + 4 max|logit / T| + 16) 2^-24), so every token whose position lies between the
    picks reachable with sums off by up to d is correct and maps to the exact pick's id; any other token maps
    to itself (a mismatch). Ids must be int64 in [0, V)."""
    logits = inputs[0]
    v = logits.shape[-1]
    if idx.dtype != torch.int64:
        raise ValueError(f"token ids must be int64, not {idx.dtype}")
    if bool(((idx < 0) | (idx >= v)).any()):
        raise ValueError(f"a token id lies outside [0, {v})")
    order, j, lo, hi = _window(*inputs)
    pos = order.argsort(dim=-1).gather(-1, idx[:, None])
    ok = (pos >= lo) & (pos <= hi)
    return torch.where(ok, order.gather(-1, j), idx[:, None]).squeeze(-1).double()


TASK = TaskSpec(
    name="TopPSample",
    version=0,
    category="indexing",
    statement=("Top-p (nucleus) sampling, one token per row, with the randomness given. Inputs: logits [B, V] "
               "(float32/float16/bfloat16), temperature [B], top_p [B] and u [B] (float32; temperature > 0, "
               "0 < top_p < 1, 0 <= u < 1). Per row: probabilities softmax(logits / temperature) in float32; "
               "the order: logits descending, equal logits by the lower token id; c the cumulative sum of the "
               "probabilities in that order; the nucleus is the first k + 1 tokens, k the first position with "
               "c[k] >= top_p (the whole row if none); the sample is the token at the first position j with "
               "c[j] > u * c[k]. Return a new int64 tensor [B] of token ids. Where float32 rounding can move a "
               "sum across top_p or u * c[k], the neighbouring tokens reachable that way are also accepted "
               "(the bound is in the contract's output_view). The shape tuple is (B, V)."),
    entry_point="top_p_sample",
    signature=("top_p_sample(logits: Tensor[B, V], temperature: Tensor[B], top_p: Tensor[B], u: Tensor[B]) "
               "-> Tensor[B] (int64)"),
    reference=reference,
    make_inputs=make_inputs,
    output_view=output_view,
    # "normal": std-1 logits (a flat row, the nucleus thousands of tokens wide); "large": std 30, a peaked row
    # whose nucleus is one or two tokens; "small": std 0.01, almost uniform (boundaries between near-equal
    # masses); "uniform": 9 levels, ties everywhere, so the id tie-break decides the pick.
    distributions=("normal", "large", "small", "uniform"),
    timed_distribution="normal",
    output_dtype=lambda dtype: "int64",
    reference_in_float64=False,         # the rule is float32's; the view admits its rounding
    workloads={
        # Tiny: the interpreter pays ~10 ms per reduction and a row takes ~40 of them (0.3-0.6 s a row on
        # a loaded CI machine), so two rows per shape. 100, 160 and 77 are not powers of two.
        "cpu": Workload(public=((2, 100), (2, 160)), heldout=((2, 77),), dtypes=("float32", "bfloat16")),
        # Samplers take float32 logits (vLLM and SGLang upcast before sampling). Llama-3's vocabulary at a
        # 256-request decode batch and Llama-2/Mistral's 32000 at 1024 (best-of-n or a large batch); held out:
        # Qwen2's 151936 at 200 requests and GPT-2's odd 50257 at 500. 0.1-0.16 GB read, floors 24-37 us at
        # 4.2 TB/s (a decode batch of a few rows is launch-bound and untimeable, hence these batch sizes).
        "cuda": Workload(public=((256, 128256), (1024, 32000)), heldout=((200, 151936), (500, 50257)),
                         dtypes=("float32",)),
    },
    # Compared through output_view: the view of a correct output equals the reference's exactly.
    tolerances={"float32": Tolerance(0.0, 0.0), "float16": Tolerance(0.0, 0.0), "bfloat16": Tolerance(0.0, 0.0)},
    # per element at least: the scale by 1 / T, the exp, the sum, and one comparison toward the order
    flops=lambda s: 4 * s[0] * s[1],
    # logits read once, temperature, top_p and u read, [B] int64 written
    min_bytes=lambda s, d: s[0] * s[1] * itemsize(d) + 3 * s[0] * 4 + s[0] * 8,
    written_bytes=lambda s, d: s[0] * 8,
    # eager sorts the whole row, materialises the float32 probabilities and their cumulative sum: an unfused
    # chain of five kernels
    e_baseline="torch.compile",
    level=3,
    tags=("indexing", "sampling", "top-p", "sort", "selection", "tie-break", "two-stage-reduction",
          "memory-bound"),
    motivation=("Nucleus sampling ends every decoding step of LLM serving (vLLM, SGLang, TensorRT-LLM) over a "
                "32k-152k vocabulary; the naive sort of the whole row dominates the sampler, and the fast "
                "kernels (FlashInfer's sorting-free sampling) find the nucleus by selection without sorting."),
    solutions=(
        Solution("triton_radix_select.py", "triton", "optimized",
                 note="one program per row, 20 passes and no sort: an online max and sum, then two radix-16 "
                      "searches over the logits' order-preserving int32 keys (each round one pass summing the "
                      "mass above 15 candidate keys, then one for the mass above the key found and its ties) for "
                      "the nucleus boundary and the pick, then one pass for the tied id"),
        Solution("triton_one_program.py", "triton", "slow", defect="too_few_programs",
                 note="the optimized solution's per-row passes, but one program for the whole batch: rows one "
                      "after another on one SM (200-1024x less parallelism at the cuda shapes)"),
        Solution("tilelang_radix_select.py", "tilelang", "optimized",
                 note="the Triton reference's radix-select algorithm (no sort) with one 128-thread block per row "
                      "sharing each of its ~21 passes: per-thread local bins folded with atomics (an integer "
                      "atomic max for the max, float atomic adds for the masses), a barrier per round, and the "
                      "tied id found from per-thread tie counts over contiguous slices; runs on the C target "
                      "(cpu-verified; bfloat16 read as uint16 bits)"),
    ),
)
