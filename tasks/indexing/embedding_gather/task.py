"""Embedding lookup: gather rows of a [V, D] table by token id."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize


def reference(ids, weight):
    return torch.nn.functional.embedding(ids, weight)


def make_inputs(shape, dtype, gen, distribution, device):
    t, v, d = shape
    weight = sample((v, d), dtype, gen, "normal" if distribution == "sparse" else distribution, device)
    if distribution == "normal":
        # distinct ids (a draw without replacement): every looked-up row is read once, which min_bytes counts
        ids = torch.randperm(v, generator=gen, device=device)[:t]
    elif distribution == "sparse":
        # a padded batch: 90% of the ids are 0 (one row read over and over), the rest uniform
        ids = torch.randint(0, v, (t,), generator=gen, device=device)
        ids = ids * (torch.rand((t,), generator=gen, device=device) < 0.1)
    elif distribution == "large":
        # the last rows of the table: offsets id * D near the table's end (int32 overflow on the cuda shapes'
        # largest V * D would show here)
        ids = v - 1 - torch.randint(0, min(v, 8), (t,), generator=gen, device=device)
    else:
        ids = torch.randint(0, v, (t,), generator=gen, device=device)   # uniform, with repeats
    return ids.to(torch.int64), weight


TASK = TaskSpec(
    name="EmbeddingGather",
    version=0,
    category="indexing",
    statement=("Look up token embeddings: ids (shape [T], int64, each in [0, V)) and weight (shape [V, D]); "
               "return out[t, :] = weight[ids[t], :] as a new tensor of shape [T, D] in weight's dtype (the "
               "values are copied exactly). The shape tuple is (T, V, D)."),
    entry_point="embedding_gather",
    signature="embedding_gather(ids: Tensor[T] (int64), weight: Tensor[V, D]) -> Tensor[T, D]",
    reference=reference,
    make_inputs=make_inputs,
    # "normal": distinct ids (timed: each row read once, as min_bytes counts); "uniform": repeats;
    # "sparse": 90% padding id 0; "large": only the table's last 8 rows (the largest offsets).
    distributions=("normal", "uniform", "sparse", "large"),
    workloads={
        # Small: the slow solution copies one scalar per step. 77 and 130 are not powers of two (masked).
        "cpu": Workload(public=((12, 50, 96), (7, 33, 77)), heldout=((9, 100, 130),),
                        dtypes=("float32", "float16")),
        # Prefill batches over Llama-2 (32000) and Llama-3 (128256) vocabularies at width 4096; held out: an
        # odd, unaligned width (3583) over GPT-2's vocabulary and a short, very wide gather (2048 ids x 16384,
        # a 405B-class hidden size). bf16: 0.13-0.27 GB moved, floors 28-56 us at 4.8 TB/s.
        "cuda": Workload(public=((8192, 32000, 4096), (16384, 128256, 4096)),
                         heldout=((9000, 50257, 3583), (4096, 151936, 8192)),
                         dtypes=("bfloat16", "float32")),
    },
    # A copy: exact (the float64 reference holds the same values upcast).
    tolerances={"float32": Tolerance(0.0, 0.0), "float16": Tolerance(0.0, 0.0), "bfloat16": Tolerance(0.0, 0.0)},
    flops=lambda s: 0,
    # The timed ("normal") ids are distinct: T rows of D read, T rows written, T int64 ids read.
    min_bytes=lambda s, d: 2 * s[0] * s[2] * itemsize(d) + s[0] * 8,
    written_bytes=lambda s, d: s[0] * s[2] * itemsize(d),
    level=1,
    tags=("indexing", "gather", "embedding", "memory-bound"),
    motivation=("Every LLM forward pass starts with an embedding lookup over a 32k-152k vocabulary, and MoE "
                "dispatch and paged KV caches gather rows by index the same way; an indirect, row-granular "
                "copy that must run at copy bandwidth."),
    solutions=(
        Solution("triton_row_blocks.py", "triton", "optimized",
                 note="one program per (id, 2048-wide column block): the id read once, the row slice "
                      "copied with vector loads and stores"),
        Solution("triton_scalar.py", "triton", "slow", defect="scalar_loop",
                 note="one program per id, its row copied one scalar load and store at a time"),
        Solution("tilelang_tiled.py", "tilelang", "optimized",
                 note="[4 ids, 1024 columns] tiles over 256 threads: each row slice copied with coalesced "
                      "loads and stores, int64 row offsets; element-wide accesses (D is symbolic, so no "
                      "vector loads); runs on the C target (cpu-verified)"),
    ),
)
