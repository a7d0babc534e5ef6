"""MoE token unpermute: gather each token's K expert outputs back by the index map and combine them."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

ZIPF_S = 1.0


def reference(expert_out, row_map, weights):
    f = torch.float64 if expert_out.dtype == torch.float64 else torch.float32
    rows = expert_out[row_map.long()].to(f)                      # [T, K, H]
    return (rows * weights.to(f)[..., None]).sum(1).to(expert_out.dtype)


def make_inputs(shape, dtype, gen, distribution, device):
    t, h, e, k = shape
    # The index map a permute step hands over: the row of (t, j) in the stable sort of the routing by expert
    # (tasks/moe/token_permute), routing drawn on the host from a seed of the trial's generator.
    seed = int(torch.randint(0, 2 ** 62, (1,), generator=gen, device=device))
    host = torch.Generator().manual_seed(seed)
    order = torch.randperm(e, generator=host)
    probs = torch.empty(e)
    probs[order] = 1.0 / torch.arange(1, e + 1, dtype=torch.float32) ** ZIPF_S
    ids = torch.multinomial(probs.expand(t, e), k, replacement=False, generator=host)
    sorted_pos = torch.sort(ids.reshape(-1), stable=True).indices
    row_map = torch.empty(t * k, dtype=torch.int64)
    row_map[sorted_pos] = torch.arange(t * k)
    expert_out = sample((t * k, h), dtype, gen, distribution, device)
    # routing weights: a softmax over each token's k logits (float32, positive, summing to one)
    weights = torch.softmax(torch.randn((t, k), generator=gen, device=device), dim=-1)
    return expert_out, row_map.reshape(t, k).to(torch.int32).to(device), weights


def error_bound(ins, dtype):
    """A float32 sum of K weighted terms errs by up to K 2^-24 sum_j w_j |e_j| (the terms may cancel); the
    products round by 2^-24 each. Twice that."""
    expert_out, row_map, weights = ins
    mag = (expert_out[row_map.long()].abs() * weights[..., None]).sum(1)
    return 2 * (row_map.shape[1] + 1) * 2.0 ** -24 * mag


TASK = TaskSpec(
    name="MoeTokenUnpermute",
    version=0,
    category="moe",
    statement=("The combine step of a mixture-of-experts layer. expert_out [T * K, H] holds the experts' output "
               "rows in expert-sorted order; row_map (int32, [T, K]) gives, for token t's j-th expert, the row "
               "of expert_out holding its output (a permutation of 0..T*K-1); weights (float32, [T, K]) are the "
               "routing weights. Return a new tensor of shape [T, H] in expert_out's dtype: "
               "y[t] = sum_j weights[t, j] * expert_out[row_map[t, j]], accumulated in float32. The shape tuple "
               "is (T, H, E, K)."),
    entry_point="moe_token_unpermute",
    signature=("moe_token_unpermute(expert_out: Tensor[T * K, H], row_map: Tensor[T, K] (int32), "
               "weights: Tensor[T, K] (float32)) -> Tensor[T, H]"),
    reference=reference,
    make_inputs=make_inputs,
    distributions=("normal", "uniform", "large", "sparse", "offset"),
    workloads={
        # Tiny for the interpreter: top-2 of 8, top-4 of 60, top-3 of 20; H = 24 and 40 not powers of two.
        "cpu": Workload(public=((8, 32, 8, 2), (6, 24, 60, 4)), heldout=((5, 40, 20, 3),),
                        dtypes=("float32", "float16")),
        # As MoeTokenPermute: DeepSeek-V2-Lite and V3 micro-batches read 1.6-1.9 GB of expert rows; held out
        # gpt-oss's unaligned H = 2880 (~115 MB, 24 us) and Mixtral's top-2 of 8.
        "cuda": Workload(public=((65536, 2048, 64, 6), (16384, 7168, 256, 8)),
                         heldout=((4000, 2880, 128, 4), (32768, 4096, 8, 2)),
                         dtypes=("bfloat16", "float16")),
    },
    # The reference is float64 on the same rounded inputs. One rounding of y (u = 2^-11 fp16, 2^-8 bf16:
    # rtol = 4u) plus the float32 sum where the K terms cancel (error_bound). atol 1e-6 guards exact zeros
    # ('sparse' rows). Summing in 16 bits, or gathering the wrong row, misses by far more.
    tolerances={"float32": Tolerance(1e-6, 1e-5), "float16": Tolerance(1e-6, 2e-3),
                "bfloat16": Tolerance(1e-6, 1.6e-2)},
    error_bound=error_bound,
    flops=lambda s: 2 * s[0] * s[3] * s[1],                    # a multiply-add per gathered element
    # every expert row read once, row_map (int32) and weights (float32) read, y written once
    min_bytes=lambda s, d: s[0] * s[3] * s[1] * itemsize(d) + 8 * s[0] * s[3] + s[0] * s[1] * itemsize(d),
    written_bytes=lambda s, d: s[0] * s[1] * itemsize(d),
    # E against torch.compile of the reference: eager materializes the gathered [T, K, H] rows before the
    # weighted sum, which no user would ship
    e_baseline="torch.compile",
    level=2,
    tags=("moe", "unpermute", "gather", "weighted-sum", "memory-bound"),
    motivation=("Every MoE layer ends by gathering each token's K expert outputs back into token order and "
                "summing them with the routing weights (Megatron-Core's moe_unpermute, vLLM's "
                "moe_sum); a fused gather-combine reads each expert row once instead of materializing "
                "[T, K, H]."),
    solutions=(
        Solution("triton_gather_sum.py", "triton", "optimized",
                 note="one program per (token, H chunk): the K row indices and weights loaded once, the K "
                      "expert rows gathered chunk by chunk (coalesced along H) into a float32 accumulator, "
                      "one store"),
        Solution("triton_scalar_loop.py", "triton", "slow", defect="scalar_loop",
                 note="one program per token, every output element a scalar loop over the K experts with "
                      "scalar loads"),
        Solution("tilelang_gather_sum.py", "tilelang", "optimized",
                 note="one block per (token, 256-wide chunk of H), one element per thread: the K row indices "
                      "and weights read as broadcasts, each expert row's chunk gathered coalesced into a float32 "
                      "register, one store; lowers to the C target, so it runs on the cpu backend"),
    ),
)
