"""The cpu shape of an imported problem: its sizes shrunk until the Triton interpreter's work is small.

The rule, and why each part (issue 36 found the old rule, "halve the largest int above 8 until there are
16k elements", refusing ~50 of KernelBench's level1/level2 problems it could take):
- Sizes are the problem's literals (importers/sizes.py), tuples included, and derived globals are recomputed
  from them (bias_shape = (out_features,) follows out_features).
- Sizes that were equal shrink together, so a square problem stays square and a structural equality
  (in_features == out_features, H == W) survives: they are one group, halved as one.
- Kernel-like sizes (kernel_size, stride, padding, dilation, ...) are never shrunk: a 5x5 kernel
  stays 5x5. Group counts shrink with what they divide, keeping MIN_PER_GROUP members a group. Sizes at or under MIN_HALVED are kept in the first pass (axes, head counts, channel counts of 3).
- When that is not enough, a second pass takes the batch-like size down to 1 and the other sizes that
  started above MIN_HALVED down to 2 (a 5-D problem at batch 16 cannot fit otherwise).
- The budget is work, not elements: inputs + state + output elements (memory traffic) and the counted
  matmul/convolution flops (a naive conv at 16k elements took 85-273 s in the interpreter on 2 cores).
"""
from __future__ import annotations

import itertools
import re
from pathlib import Path

from kernelgym_gap.importers import analysis
from kernelgym_gap.importers.analysis import ImportRefused

CPU_ELEMENTS = 1 << 14      # inputs + state + output of a cpu shape
CPU_FLOPS = 1 << 19         # counted matmul/conv flops of a cpu shape (2^18 multiply-adds)
MIN_HALVED = 8              # sizes at or under this are kept in the first pass
# sizes the op's structure needs as they are: never shrunk
_KEPT = re.compile(r"kernel|stride|padding|pad$|dilation|output_padding|window|pool_size", re.I)
# A group count (GroupNorm's num_groups, a grouped conv's groups) shrinks, but never below MIN_PER_GROUP
# members per group (or the problem's own count, if fewer): kept whole while its channels shrank, level2
# 37_Matmul_Swish_Sum_GroupNorm (4096 features in 64 groups) reached 64 features in 64 groups, one value per
# group, and GroupNorm's output was rounding noise: refused as degenerate, an artifact of the shrink
# (75_Gemm_GroupNorm_Min_BiasAdd likewise: 2 values a group normalise to +-1, and their min is a constant)
_GROUPS = re.compile(r"groups", re.I)
_GROUPED = re.compile(r"channels|features|hidden", re.I)     # what a group count divides (not D, H, W, batch)
MIN_PER_GROUP = 4


# A problem whose state the sizes do not reach (a level-3 network's layer widths written in __init__) cannot
# meet the budget above. It is still imported when its smallest shape is under this one: the task then says
# its cpu shape is over the interpreter's budget (slow on the cpu backend; meant for cuda).
HEAVY_ELEMENTS = 1 << 25
HEAVY_FLOPS = 1 << 30         # the heavy shape is shrunk to this (DenseNet121 ran past the time limit at 2^32)
# A problem that cannot get under HEAVY_FLOPS is still taken up to this, at the smallest shape it reaches: the
# float64 reference costs 0.21-0.35 ns per counted flop on one thread of the 2-core host (19_MobileNetV1 at
# batch 1, 1.14e9 flops: 0.24 s a forward; 10_ResNet101's cpu shape, 7.4e8: 0.26 s; 2026-12-06, loaded), so
# 2^31 is 0.45-0.75 s a forward, within the ~1 s HEAVY_FLOPS was meant to be (an import of 10_ResNet101 at
# 0.26 s a forward took 131 s of the default 300 s --timeout). Shapes that reach HEAVY_FLOPS are unchanged.
HEAVY_FLOPS_MAX = 1 << 31


def _within(facts: dict, budget: tuple[int, int]) -> bool:
    return facts["elements"] <= budget[0] and facts["flops"] <= budget[1]


def _groups(original: dict[str, int], sizes: dict[str, int], names) -> list[list[str]]:
    """`names` grouped by equal ORIGINAL value (an equality the problem wrote, not one shrinking made), the
    group holding the largest current value first."""
    by_value: dict[int, list[str]] = {}
    for n in names:
        by_value.setdefault(original[n], []).append(n)
    return sorted(by_value.values(), key=lambda g: -max(sizes[n] for n in g))


def kept(name: str) -> bool:
    return bool(_KEPT.search(name))


def keeps_groups(original: dict[str, int], trial: dict[str, int]) -> bool:
    """Every channel or feature count that a group count divided in the problem still divides into that many
    groups with at least min(MIN_PER_GROUP, its own count) members each."""
    for g in (n for n in original if _GROUPS.search(n) and original[n] > 1):
        for a in original:
            if a == g or not _GROUPED.search(a) or original[a] <= original[g] or original[a] % original[g]:
                continue
            members = min(MIN_PER_GROUP, original[a] // original[g])
            if trial[a] % trial[g] or trial[a] // trial[g] < members:
                return False
    return True


def keeps_members(own: int | None, facts: dict) -> bool:
    """The model's GroupNorms (counted on it: analysis.group_members) keep min(MIN_PER_GROUP, the problem's own)
    channels a group. keeps_groups sees only group counts that are size globals; level2 27's GroupNorm takes
    num_groups=4 from an __init__ default, and out_channels 16 -> 4 left one channel a group, whose spatial
    mean after the norm is its bias whatever the input (refused as degenerate: an artifact of the shrink)."""
    if own is None:
        return True
    members = facts.get("group_members")
    return members is not None and members >= min(MIN_PER_GROUP, own)


def batch_floor(min_batch: int, own: int) -> int:
    """The least a batch-like size may take on the cpu, public or held-out: `min_batch` (kernelbench.build_meta's
    repair of a problem degenerate at batch 1), never above the problem's own batch `own`, never under 1."""
    return max(1, min(min_batch, own))


def shrink_for_cpu(path: Path, sizes: dict[str, int], batch: str | None = None,
                   budget: tuple[int, int] = (CPU_ELEMENTS, CPU_FLOPS),
                   min_batch: int = 1) -> tuple[dict[str, int], list[str]]:
    """The cpu sizes and the steps taken (`name/2`), or ImportRefused saying what is left over `budget`
    (elements, counted flops). `min_batch`: the batch-like size is not halved below it (nor below its own
    value): kernelbench.build_meta's repair of a problem degenerate at batch 1."""
    own_members = analysis.meta_facts(path, sizes).get("group_members")
    original = dict(sizes)
    sizes, steps = dict(sizes), []
    free = [n for n in sizes if not kept(n)]

    def floor(name: str, second: bool) -> int:
        if not second:
            return MIN_HALVED
        return 1 if name == batch else 3          # halve while the value is above this: batch to 1, others to 2

    for second in (False, True):
        while True:
            facts = analysis.meta_facts(path, sizes)
            if _within(facts, budget):
                return sizes, steps
            movable = [n for n in free if sizes[n] > floor(n, second)
                       and (not second or n == batch or original[n] > MIN_HALVED)]
            groups = _groups(original, sizes, movable)
            # one group at a time; else two together, else all: sizes tied by the op rather than by equal
            # values (34_ConvTranspose3d_LayerNorm: LayerNorm(out_channels) over the last dim, 2 * W) move only
            # together
            tries = ([g] for g in groups)
            pairs = ([a, b] for i, a in enumerate(groups) for b in groups[i + 1:])
            for combo in itertools.chain(tries, pairs, [groups] if len(groups) > 2 else []):
                names = [n for g in combo for n in g]
                trial = dict(sizes, **{n: max(1, sizes[n] // 2) for n in names})
                if not keeps_groups(original, trial):
                    continue
                if batch is not None and trial[batch] < batch_floor(min_batch, original[batch]):
                    continue                # before the analysis below: nothing to count for a size not taken
                try:
                    trial_facts = analysis.meta_facts(path, trial)
                except Exception:  # noqa: BLE001 - that halving breaks the problem: try the next
                    continue
                if not keeps_members(own_members, trial_facts):
                    continue
                sizes = trial
                steps.append("+".join("=".join(g) for g in combo) + "/2")
                break
            else:
                break
    facts = analysis.meta_facts(path, sizes)
    fixed = [n for n in original if kept(n)]
    raise ImportRefused(
        f"cannot be shrunk to a cpu shape: at sizes {', '.join(f'{k}={v}' for k, v in sizes.items())} "
        f"it still has {facts['elements']} elements and {facts['flops']} counted flops, over the budget of "
        f"{budget[0]} elements and {budget[1]} flops"
        + (f" (kept as the op needs them: {', '.join(fixed)})" if fixed else ""))


def plan(path: Path, min_batch: int = 1):
    """(sizes, their meta facts, the batch-like size, the cpu sizes, the steps taken, why the cpu shape is
    over the interpreter's budget or None), or ImportRefused. `min_batch`: as shrink_for_cpu's."""
    sizes = analysis.size_globals(path)
    try:
        own = analysis.meta_facts(path, sizes)      # the problem's own sizes, on the meta device
    except ImportRefused:
        raise
    except Exception as e:  # noqa: BLE001
        raise ImportRefused(f"forward does not run at the problem's own sizes: {type(e).__name__}: "
                            f"{str(e).strip().splitlines()[-1] if str(e).strip() else ''}") from None
    batch = analysis.batch_size_name(path, sizes, own)
    try:
        cpu_sizes, steps = shrink_for_cpu(path, sizes, batch, min_batch=min_batch)
        return sizes, own, batch, cpu_sizes, steps, None
    except ImportRefused as light:
        try:                            # a larger shape, if the analysis and the interpreter can hold it
            cpu_sizes, steps = shrink_for_cpu(path, sizes, batch, (HEAVY_ELEMENTS, HEAVY_FLOPS), min_batch)
        except ImportRefused:
            try:
                cpu_sizes, steps = shrink_for_cpu(path, sizes, batch, (HEAVY_ELEMENTS, HEAVY_FLOPS_MAX), min_batch)
            except ImportRefused:
                raise ImportRefused(f"{light}; nor under the {HEAVY_ELEMENTS} elements and {HEAVY_FLOPS_MAX} flops "
                                    f"a cpu-heavy task may have") from None
    facts = analysis.meta_facts(path, cpu_sizes)
    heavy = (f"cpu shape over the interpreter's budget ({facts['elements']} elements, {facts['flops']} flops; "
             f"{CPU_ELEMENTS} and {CPU_FLOPS} are the budget): slow on the cpu backend, meant for cuda")
    return sizes, own, batch, cpu_sizes, steps, heavy


# A training-mode BatchNorm normalising over fewer values per channel than this is ill-conditioned enough that
# taking a few more away changes float32's own error several-fold: 10_ResNet101 at its cpu shape (layer3 and
# layer4 at 1x1) errs by 6.8e-4-9.5e-4 of its output's rms at batch 10, 3.2e-3-3.7e-3 at batch 7 (its 3/4
# held-out batch, refused as ill-conditioned), 3.6e-4-4.6e-4 at 15 (2026-12-06, cpu). There a held-out shape
# grows the batch (3/2) rather than shrinking it; above it the 3/4 rule stands (cuda shapes: 490 values).
BATCHNORM_FEW = 64


def _fewer_batchnorm_values(public: int | None, heldout: int | None) -> bool:
    return public is not None and heldout is not None and heldout < public and heldout < BATCHNORM_FEW


def heldout_of(path: Path, sizes: dict[str, int], batch: str, original: dict[str, int] | None = None,
               min_batch: int = 1) -> dict[str, int]:
    """The held-out shape: the batch-like size scaled by 3/4 (a size that is no power of two, so edge masks
    run), doubled when that leaves it unchanged or breaks the problem, and grown by 3/2 instead where 3/4 would
    leave a training-mode BatchNorm fewer values per channel, under BATCHNORM_FEW (a shrink that makes the
    problem ill-conditioned, not the problem itself). Where the batch alone cannot move, the
    sizes the problem wrote equal to it move with it (HingeLoss broadcasts targets of [batch] against
    predictions of [batch, input_shape[0]], both 32768: that equality is the problem's structure).
    `min_batch`: a held-out batch under it is not taken (3/4 of 2 is 1), as in shrink_for_cpu."""
    original = original or sizes
    v = sizes[batch]
    tied = [n for n in sizes if original[n] == original[batch] and sizes[n] == v and not kept(n)]
    fewest = analysis.meta_facts(path, sizes).get("bn_fewest")
    for names in ([batch], tied) if len(tied) > 1 else ([batch],):
        for new in (v * 3 // 4, v * 2):
            if new < batch_floor(min_batch, original[batch]) or new == v:
                continue
            cfg = dict(sizes, **{n: new for n in names})
            try:
                facts = analysis.meta_facts(path, cfg)
            except Exception:  # noqa: BLE001 - that size breaks the problem: try the next
                continue
            if new < v and _fewer_batchnorm_values(fewest, facts.get("bn_fewest")):
                grown = dict(sizes, **{n: v * 3 // 2 for n in names})     # still no power of two for 10, 12...
                try:
                    if v * 3 // 2 != v:
                        analysis.meta_facts(path, grown)
                        return grown
                except Exception:  # noqa: BLE001 - then doubling, next
                    pass
                continue
            return cfg
    raise ImportRefused(f"no held-out shape: neither 3/4 nor twice {batch}={v} gives a problem that runs")
