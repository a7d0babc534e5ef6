"""Paged decode attention: one query token per sequence against a KV cache stored in fixed-size pages."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

_V_DISTRIBUTION = {"large": "normal"}        # as in DecodeAttention: 'large' scales q and k only


def reference(q, k_cache, v_cache, block_table, seq_lens):
    # What a torch user writes without a paged kernel: gather every sequence's pages into a padded
    # [B, H, L, D] cache and run the fused attention with a length mask.
    b, h, d = q.shape
    page = k_cache.shape[1]
    lmax = block_table.shape[1] * page
    pos = torch.arange(lmax, device=q.device)
    rows = (block_table.long()[:, pos // page] * page + pos % page)              # [B, L]
    k = k_cache.reshape(-1, h, d)[rows].transpose(1, 2)                           # [B, H, L, D]
    v = v_cache.reshape(-1, h, d)[rows].transpose(1, 2)
    mask = (pos[None, :] < seq_lens.long()[:, None])[:, None, None, :]            # [B, 1, 1, L]
    return torch.nn.functional.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask).squeeze(2)


def seq_lengths(b: int, lmax: int) -> list[int]:
    """Each sequence's cached length: evenly spread from lmax down to ~lmax / 4 (a fixed sum, so that
    min_bytes is exact; make_inputs shuffles them and moves tokens from the longest to the shortest)."""
    return [lmax - (i * 3 * lmax) // (4 * b) for i in range(b)]


def pages_needed(b: int, lmax: int, page: int) -> int:
    return sum(-(-n // page) for n in seq_lengths(b, lmax))


def make_inputs(shape, dtype, gen, distribution, device):
    b, h, lmax, d, page = shape
    max_pages = -(-lmax // page)
    lens = [seq_lengths(b, lmax)[i] for i in torch.randperm(b, generator=gen, device=device).tolist()]
    # move a random number of tokens from the longest sequence to the shortest: the total (so min_bytes and
    # flops) stays exact, the lengths themselves vary with the seed
    r = int(torch.randint(0, 2 ** 30, (1,), generator=gen, device=device))
    lo, hi = lens.index(min(lens)), lens.index(max(lens))
    room = min(lens[hi] - 1, lmax - lens[lo])          # lengths stay within 1..lmax
    if room >= 1:
        delta = 1 + r % room
        lens[lo] += delta
        lens[hi] -= delta
    # every sequence may straddle one more page than its share: a page count fixed per shape
    n_pages = pages_needed(b, lmax, page) + b
    n_pages += max(1, n_pages // 8)                          # spare pages that no sequence owns (garbage)
    perm = torch.randperm(n_pages, generator=gen, device=device)
    table = torch.zeros((b, max_pages), dtype=torch.int32, device=device)   # entries past a sequence: 0
    cursor = 0
    for i, n in enumerate(lens):
        np_ = -(-n // page)
        table[i, :np_] = perm[cursor:cursor + np_].to(torch.int32)
        cursor += np_
    qk_scale = 0.2 if distribution == "large" else 1.0
    q = sample((b, h, d), dtype, gen, distribution, device, scale=qk_scale)
    k_cache = sample((n_pages, page, h, d), dtype, gen, distribution, device, scale=qk_scale)
    v_cache = sample((n_pages, page, h, d), dtype, gen, _V_DISTRIBUTION.get(distribution, distribution), device)
    return q, k_cache, v_cache, table, torch.tensor(lens, dtype=torch.int32, device=device)


def error_bound(ins, dtype):
    """As DecodeAttention's: a split-L kernel may round each split's partial output to the input dtype, off
    by up to u * sum_j p_j |v_j| (u = 2^-11 fp16, 2^-8 bf16); twice that."""
    q, k_cache, v_cache, table, lens = ins
    u = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}.get(dtype, 0.0)
    return 2 * u * reference(q, k_cache, v_cache.abs(), table, lens)


def min_bytes(s, d):
    """q read and o written once; every cached key and value of every sequence read once (only the valid
    positions: sum of the lengths); the block table and the lengths read."""
    b, h, lmax, dim, page = s
    tokens = sum(seq_lengths(b, lmax))
    return (2 * b * h * dim + 2 * tokens * h * dim) * itemsize(d) + 4 * b * (-(-lmax // page) + 1)


TASK = TaskSpec(
    name="PagedDecodeAttention",
    version=0,
    category="attention",
    statement=("Attention for one decoding step over a paged KV cache (vLLM's PagedAttention layout). q has "
               "shape [B, H, D]; k_cache and v_cache have shape [P, PAGE, H, D] (P pages of PAGE token slots, "
               "every head of a token together); block_table (int32, [B, MAXP]) lists each sequence's pages in "
               "order, and seq_lens (int32, [B]) its cached length: token position j of sequence b sits in page "
               "block_table[b, j // PAGE] at slot j % PAGE. Entries of block_table past a sequence's last "
               "page, and pages no sequence owns, hold garbage: never read them. For every b and h: "
               "o[b, h] = sum_{j < seq_lens[b]} softmax_j(q[b, h] . k[b, h, j] * D^-0.5) v[b, h, j]. Return a "
               "new O of shape [B, H, D] in the input dtype; scores, softmax and sum in float32 (subtract the "
               "maximum). The shape tuple is (B, H, L, D, PAGE), L the longest sequence; D a power of two."),
    entry_point="paged_decode_attention",
    signature=("paged_decode_attention(q: Tensor[B, H, D], k_cache: Tensor[P, PAGE, H, D], "
               "v_cache: Tensor[P, PAGE, H, D], block_table: Tensor[B, MAXP] (int32), "
               "seq_lens: Tensor[B] (int32)) -> Tensor[B, H, D]"),
    reference=reference,
    make_inputs=make_inputs,
    distributions=("normal", "large", "uniform", "sparse"),
    workloads={
        # Small for the interpreter (the slow solution's key walk): lengths 44/28, 18/14/9 and 19/12 are not
        # all multiples of the 8- and 4-slot pages (partial last pages), the sequences' pages scattered in
        # random order among spare garbage pages. 44 keys, not fewer: at 24 a float16 running sum still
        # passed every distribution (tests/test_tolerances.py); at 44 it misses on "large".
        "cpu": Workload(public=((2, 2, 44, 16, 8), (3, 1, 18, 32, 4)), heldout=((2, 1, 19, 16, 8),),
                        dtypes=("float32", "float16")),
        # Batched serving of a 7-8B model (32 heads, head_dim 128, 16-slot pages): 32 sequences up to 4096
        # tokens (1.3 GB of KV read, ~280 us at 4.8 TB/s) and 128 up to 1024; held out: 4 long contexts up to
        # 30000 tokens with 40 heads (160 (b, h) pairs: the cache must be split across programs) and 48
        # sequences up to an odd 3001 tokens, head_dim 64, 32-slot pages.
        "cuda": Workload(public=((32, 32, 4096, 128, 16), (128, 32, 1024, 128, 16)),
                         heldout=((4, 40, 30000, 128, 16), (48, 32, 3001, 64, 32)),
                         dtypes=("float16", "bfloat16")),
    },
    # As DecodeAttention v1 (same arithmetic, the gather changes no value): fp16 atol 2e-3, rtol 4e-3; bf16
    # atol 1e-3, rtol 3e-2 plus error_bound (2 u sum_j p_j |v_j|, what rounding a split's partial output to
    # the input dtype may cost); float32 (cpu) 5e-4 for the float32 score round-off. Reading a garbage page,
    # or a slot past the length, or a wrong page order misses by far more.
    tolerances={"float32": Tolerance(5e-4, 5e-4), "float16": Tolerance(2e-3, 4e-3),
                "bfloat16": Tolerance(1e-3, 3e-2)},
    error_bound=error_bound,
    flops=lambda s: 4 * s[1] * s[3] * sum(seq_lengths(s[0], s[2])),     # q.k and p*v over the valid keys
    min_bytes=min_bytes,
    written_bytes=lambda s, d: s[0] * s[1] * s[3] * itemsize(d),
    level=3,
    tags=("attention", "decode", "kv-cache", "paged", "variable-length", "memory-bound", "split-k"),
    motivation=("Every LLM serving engine (vLLM, SGLang, TensorRT-LLM) stores the KV cache in pages to avoid "
                "fragmentation; the decode kernel must follow each sequence's block table through scattered "
                "pages at memory bandwidth, with sequences of very different lengths in one batch."),
    solutions=(
        Solution("triton_split_kv.py", "triton", "optimized",
                 note="flash-decoding over pages: grid (B*H, splits of the longest length); each program maps "
                      "its keys' positions through the block table (one page id per key tile row), streams K "
                      "and V with an online softmax up to its sequence's length and writes a float32 partial; "
                      "a combine kernel rescales the partials"),
        Solution("triton_scalar_loop.py", "triton", "slow", defect="scalar_loop",
                 note="one program per (b, h) walks its sequence one key at a time: a block-table load, a "
                      "D-wide key load, a scalar online-softmax update and a D-wide axpy per key"),
        Solution("tilelang_split_kv.py", "tilelang", "optimized",
                 note="flash-decoding over pages: a block per (256-key split, head, sequence); threads score "
                      "strided keys through the block table into a float32 scratch, the split's max and sum "
                      "folded by atomics across barriers, then a thread per head dimension accumulates p * v "
                      "into a float32 partial; a combine launch rescales the partials; lowers to the C target, "
                      "so it runs on the cpu backend"),
    ),
)
