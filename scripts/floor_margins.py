"""Per task, the margin between the best U an honest kernel measured and the integrity bound (issue 31).

A kernel whose time is under `floor_tolerance x floor` is `faster_than_floor` (reward 0): in U terms, U above
1 / floor_tolerance. This script reads every committed H200 gap-study file (results/**/gap_study*.json: the
reference solutions, optimized and slow, and the library each was timed against), recomputes each timed
shape's floor with today's task (its current min_bytes and read/write split) and today's floor
(judge/floor.py) from the calibration the file was measured with, and prints per task the best kernel U and
the best library U under that floor, and their margin to the bound.

Rescaled, not re-measured: the files' calibrations hold the copy rate only (the read and write rates of
judge/calibrate.py were not measured on the H200 yet: owed), so today's floor there is the copy-only one,
i.e. each row's own floor wherever the task's min_bytes did not change. A row of an older task version
(CrossEntropy v0, GroupedGemm v0) is rescaled to the current version's floor with its old timing; for
GroupedGemm v1, whose routing changed, that is an estimate until the corpus is timed again (owed).

    python scripts/floor_margins.py [--markdown] [--tolerance 0.8]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelgym_gap.core.config import EvalConfig  # noqa: E402
from kernelgym_gap.core.errors import UnknownTaskError  # noqa: E402
from kernelgym_gap.judge.calibrate import Calibration  # noqa: E402
from kernelgym_gap.judge.floor import floor_ms, u_bound  # noqa: E402

REQUIRED_MARGIN = 1.05          # no honest kernel within 5% of the bound


@dataclasses.dataclass
class Best:
    task: str
    u: float = 0.0
    u_what: str = ""
    library_u: float = 0.0
    library_what: str = ""
    rows: int = 0
    older_versions: set = dataclasses.field(default_factory=set)

    def margin(self, bound: float) -> float:
        return bound / max(self.u, self.library_u)


def study_files(root: Path = ROOT) -> list[Path]:
    """The committed H200 gap-study files (the cpu study has no timings)."""
    return sorted(p for p in (root / "results").rglob("gap_study*.json")
                  if (json.loads(p.read_text()).get("meta") or {}).get("backend") == "cuda")


def _calibration(meta: dict) -> Calibration:
    c = meta["calibration"]
    return Calibration(device_key="study", device_name=c.get("device", "?"), copy_bytes_per_s=c["copy_bytes_per_s"],
                       matmul_flops_per_s=dict(c["matmul_flops_per_s"]), source=c.get("source", "measured"),
                       read_bytes_per_s=c.get("read_bytes_per_s"), write_bytes_per_s=c.get("write_bytes_per_s"))


def margins(registry=None, files: list[Path] | None = None) -> tuple[dict[str, Best], list[str]]:
    """Per current task name, the best kernel and library U of the committed rows under today's floor; and
    the rows left out (a task no longer registered, a shape today's task cannot take)."""
    from kernelgym_gap.core.registry import default_registry
    registry = registry or default_registry()
    best: dict[str, Best] = {}
    skipped: list[str] = []
    for path in files or study_files():
        data = json.loads(path.read_text())
        cal = _calibration(data["meta"])
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        for row in data["rows"]:
            name, _, version = row["task"].rpartition("/")[2].rpartition("-v")
            try:
                task = registry.get(name)
            except UnknownTaskError:
                skipped.append(f"{row['task']} ({where}): not registered")
                continue
            b = best.setdefault(task.name, Best(task.name))
            if str(task.version) != version:
                b.older_versions.add(f"v{version}")
            for p in row.get("per_shape") or []:
                shape, dtype = tuple(p["shape"]), p["dtype"]
                try:
                    fl, _ = floor_ms(task, shape, dtype, cal)
                except Exception as e:  # noqa: BLE001 - a shape of an older version the task cannot take
                    skipped.append(f"{row['task']} {list(shape)} ({where}): {type(e).__name__}")
                    continue
                b.rows += 1
                label = f"{row['kernel']} {list(shape)} {dtype} ({where.parts[1] if len(where.parts) > 2 else where.name})"
                if p.get("kernel_ms") and fl / p["kernel_ms"] > b.u:
                    b.u, b.u_what = fl / p["kernel_ms"], label
                if p.get("library_ms") and fl / p["library_ms"] > b.library_u:
                    b.library_u, b.library_what = fl / p["library_ms"], f"library {list(shape)} {dtype}"
    return best, skipped


def table(best: dict[str, Best], tolerance: float, markdown: bool = True) -> str:
    bound = u_bound(tolerance)
    head = (f"Integrity bound: U > {bound:.3g} (floor_tolerance {tolerance}) is faster_than_floor; required: "
            f"best U <= {bound / REQUIRED_MARGIN:.3g} (5% under it).")
    lines = [head, "", "| task | best kernel U | kernel | best library U | margin to the bound | note |",
             "|---|---|---|---|---|---|"]
    for b in sorted(best.values(), key=lambda b: b.margin(bound)):
        note = ", ".join(sorted(b.older_versions))
        note = f"{note} rows rescaled to today's version" if note else ""
        lines.append(f"| {b.task} | {b.u:.3f} | {b.u_what} | {b.library_u:.3f} | {b.margin(bound):.2f}x | {note} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tolerance", type=float, default=EvalConfig().floor_tolerance)
    ap.add_argument("--markdown", action="store_true", help="(the default) a markdown table")
    args = ap.parse_args(argv)
    best, skipped = margins()
    print(table(best, args.tolerance))
    if skipped:
        print(f"\n{len(skipped)} rows left out: " + "; ".join(skipped[:10]) + (" ..." if len(skipped) > 10 else ""))
    bound = u_bound(args.tolerance)
    close = [b.task for b in best.values() if b.margin(bound) < REQUIRED_MARGIN]
    print(f"\n{len(best)} tasks; within 5% of the bound: {', '.join(close) if close else 'none'}")
    return 1 if close else 0


if __name__ == "__main__":
    sys.exit(main())
