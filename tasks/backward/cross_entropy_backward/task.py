"""Cross-entropy backward: dlogits from logits, int64 targets (ignore_index = -100) and per-token dloss."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

IGNORE_INDEX = -100


def reference(logits, targets, dloss):
    # The backward of F.cross_entropy(logits.float(), targets, reduction="none", ignore_index=-100) with
    # upstream gradient dloss, written out (autograd runs the same: softmax, minus the one-hot, scaled).
    f = torch.float64 if logits.dtype == torch.float64 else torch.float32
    p = torch.softmax(logits.to(f), dim=-1)
    valid = targets != IGNORE_INDEX
    onehot = torch.nn.functional.one_hot(targets.clamp_min(0), logits.shape[-1]).to(f)
    scale = torch.where(valid, dloss.to(f), torch.zeros((), dtype=f, device=logits.device))
    return ((p - onehot) * scale[:, None]).to(logits.dtype)


def ignored_tokens(tokens: int) -> int:
    """Padding / prompt tokens (target -100): a tenth, at least one; an exact count so that min_bytes (which
    leaves their logits unread) is the true minimum."""
    return max(1, tokens // 10) if tokens > 1 else 0


def make_inputs(shape, dtype, gen, distribution, device):
    tokens, vocab = shape
    logits = sample((tokens, vocab), dtype, gen, distribution, device)
    targets = torch.randint(0, vocab, (tokens,), generator=gen, device=device, dtype=torch.int64)
    order = torch.rand((tokens,), generator=gen, device=device).argsort()
    ignored = torch.zeros(tokens, dtype=torch.bool, device=device)
    ignored[order[:ignored_tokens(tokens)]] = True
    # the upstream gradient of each token's loss, float32: 1 / T for a mean loss, scaled per token here (a
    # weighted loss) so that a kernel ignoring it fails
    dloss = (torch.rand((tokens,), generator=gen, device=device) + 0.5) / tokens
    return logits, targets.masked_fill(ignored, IGNORE_INDEX), dloss


def error_bound(ins, dtype):
    """A float32 kernel's softmax: exp(x - max) errs by ~|x - max| * 2^-24 relative, the sum over V by up to
    V * 2^-24 relative (a sequential sum), so p errs by ~(|x - max| + V + 2) * 2^-24 * p; p - 1 at the target
    rounds by 2^-24. Times |dloss|, twice."""
    logits, targets, dloss = ins
    p = torch.softmax(logits, dim=-1)
    spread = logits.max(-1, keepdim=True).values - logits
    err = (spread + logits.shape[-1] + 2) * 2.0 ** -24 * p + 2.0 ** -24
    valid = (targets != IGNORE_INDEX).to(logits.dtype)
    return 2 * err * (dloss.abs() * valid)[:, None]


TASK = TaskSpec(
    name="CrossEntropyBackward",
    version=0,
    category="backward",
    statement=("The gradient of per-token cross-entropy with respect to the logits. Inputs: logits [T, V] "
               "(float32/float16/bfloat16), int64 targets [T] and float32 dloss [T] (the upstream gradient of "
               "each token's loss). Return a new tensor of the logits' shape and dtype: for a token whose "
               "target is not -100, dlogits[t, j] = (softmax(logits[t])_j - [j == targets[t]]) * dloss[t]; the "
               "row of a token whose target is -100 (ignore_index) is all zeros (its logits need not be read; "
               "never index with -100). Compute the softmax in float32, subtracting the row maximum; "
               "vocabularies are too wide for one block (chunked: an online max and rescaled sum, then a pass "
               "that writes)."),
    entry_point="cross_entropy_backward",
    signature=("cross_entropy_backward(logits: Tensor[T, V], targets: Tensor[T] (int64), "
               "dloss: Tensor[T] (float32)) -> Tensor[T, V]"),
    reference=reference,
    make_inputs=make_inputs,
    # "large" (std 30): exp overflows float32 without the max subtraction, p nearly one-hot (p - 1 cancels
    # at the target); "offset" (mean 8); "small": p ~ 1/V everywhere; "uniform"; "normal" (timed).
    distributions=("normal", "large", "offset", "small", "uniform"),
    workloads={
        # Tiny for the interpreter: 200 and 300 are not powers of two; the optimized solution's cpu chunks
        # are 128 wide, so 200 and 300 span 2-3 chunks (the online rescaling) with a masked tail.
        "cpu": Workload(public=((6, 128), (5, 200)), heldout=((4, 300),), dtypes=("float32", "float16")),
        # LLM training logits [tokens, vocab]: Llama-2 (32000), Llama-3 (128256); held out GPT-2's odd 50257
        # and Qwen2's 151936 with few tokens. 0.5-1 GB (bf16) moved: >= 100 us at 4.8 TB/s.
        "cuda": Workload(public=((4096, 32000), (2048, 128256)), heldout=((5000, 50257), (1500, 151936)),
                         dtypes=("bfloat16", "float32")),
    },
    # The reference runs in float64 on the same rounded inputs. 16-bit outputs: one rounding (u = 2^-11 fp16,
    # 2^-8 bf16 relative: rtol = 4u); float32: rtol 1e-5; plus the float32 softmax's own error (error_bound,
    # largest on the 'large' rows where |x - max| ~ 300). atol: dlogits ~ dloss / V is ~1e-3 on the cpu
    # shapes and ~1e-8 on cuda's (dloss ~ 1/T), so a larger atol would pass a constant output; float32 and
    # bfloat16 (float32's exponent range) get 1e-9 for exact zeros, float16 (cpu only) 3e-8, half its
    # subnormal step. A kernel that skips the max subtraction (inf/nan on 'large'), drops dloss, or writes
    # garbage into ignored rows fails.
    tolerances={"float32": Tolerance(1e-9, 1e-5), "float16": Tolerance(3e-8, 2e-3),
                "bfloat16": Tolerance(1e-9, 1.6e-2)},
    error_bound=error_bound,
    # per element: subtract the max, exp, sum (3, max counted), divide, minus one-hot, times dloss (3)
    flops=lambda s: 6 * s[0] * s[1],
    # the logits of counted tokens read once, targets (int64) and dloss (float32) read, dlogits written once
    min_bytes=lambda s, d: ((s[0] - ignored_tokens(s[0])) * s[1] * itemsize(d) + 12 * s[0]
                            + s[0] * s[1] * itemsize(d)),
    written_bytes=lambda s, d: s[0] * s[1] * itemsize(d),
    # E against torch.compile of the reference: eager runs softmax, one_hot, subtract and scale as separate
    # kernels over the [T, V] logits, which no user would ship
    e_baseline="torch.compile",
    level=3,   # an online algorithm (chunked online softmax per row) (core/task.py LEVELS; re-applied in issue 34)
    tags=("cross-entropy", "backward", "training", "softmax", "online-softmax", "logits"),
    motivation=("Every LLM training step backpropagates its loss through the largest activation it has, the "
                "[tokens, vocab] logits; fused kernels (Liger's, Unsloth's, torch.compile's) compute the "
                "gradient in two streaming passes over each row without materializing the float32 softmax."),
    solutions=(
        Solution("triton_two_pass.py", "triton", "optimized",
                 note="one program per token; pass 1 walks the row in chunks with an online max and rescaled "
                      "sum (float32), pass 2 re-reads the chunks and writes (p - onehot) * dloss; ignored rows "
                      "are written as zeros without reading the logits"),
        Solution("triton_scalar_loop.py", "triton", "slow", defect="scalar_loop",
                 note="one program per token; the max, the sum and the gradient walk the row one scalar "
                      "element at a time"),
        Solution("tilelang_two_pass.py", "tilelang", "optimized",
                 note="one block per token; pass 1: per-thread online max and rescaled sum over strided "
                      "(coalesced) elements, folded across the block by an atomic max, a barrier and an atomic "
                      "add; pass 2 re-reads the row and writes (p - onehot) * dloss; ignored rows written as "
                      "zeros unread; lowers to the C target, so it runs on the cpu backend"),
    ),
)
