"""Every evaluation's stages on a timeline (issue 35): a Chrome/Perfetto trace JSON and a PNG per mode of a
records file that scripts/throughput.py wrote (throughput_records.jsonl), or of a simulator trace that
scripts/simulate_throughput.py wrote (--trace-out).

    python3 scripts/trace_timeline.py results/h200_2026-12-05/throughput_full_records.jsonl \
        --out results/trace_timeline/h200_2026-12-05
    python3 scripts/trace_timeline.py RECORDS --mode lanes --out DIR

Per mode: <records stem>_<mode>.trace.json (open in https://ui.perfetto.dev or chrome://tracing; pid = GPU,
tid = slot, and two threads for the lane's exclusive and shared holds) and <records stem>_<mode>.png (no PNG
without matplotlib: said, not an error). A record holds its end time and its stages' durations, not their
starts, so the stages are laid out from each record's start in the pipeline's order (kernelgym_gap/sim/trace.py
says how, and what that approximates)."""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_") or "mode"


def main(argv: list[str] | None = None) -> int:
    from kernelgym_gap.sim import trace
    from kernelgym_gap.sim.workload import RecordError, read_records
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", help="a throughput_records.jsonl")
    ap.add_argument("--out", default=str(ROOT / "results" / "trace_timeline"), help="the folder written to")
    ap.add_argument("--mode", action="append", help="only these modes (repeatable; default every mode)")
    ap.add_argument("--no-png", action="store_true", help="the trace JSON only")
    args = ap.parse_args(argv)
    try:
        rows = read_records(args.records)
    except (OSError, RecordError) as e:
        print(f"trace_timeline: {e}", file=sys.stderr)
        return 2
    modes = sorted({r.get("mode", "") for r in rows})
    if args.mode:
        unknown = sorted(set(args.mode) - set(modes))
        if unknown:
            print(f"trace_timeline: no record of mode {unknown} (modes: {modes})", file=sys.stderr)
            return 2
        modes = args.mode
    stem = Path(args.records).name.removesuffix(".jsonl")
    out = Path(args.out)
    for mode in modes:
        of_mode = [r for r in rows if r.get("mode", "") == mode]
        intervals = trace.intervals_from_records(of_mode)
        title = f"{args.records} [{mode}]: {len(of_mode)} evaluations (stages rebuilt from durations)"
        path = trace.write_trace(intervals, out / f"{stem}_{slug(mode)}.trace.json", title)
        print(f"wrote {path} ({len(intervals)} stages)")
        if not args.no_png:
            png = trace.write_png(intervals, out / f"{stem}_{slug(mode)}.png", title)
            print(f"wrote {png}" if png else "no PNG: matplotlib is not installed")
    return 0


if __name__ == "__main__":
    import time as _time
    _started = _time.time()
    _rc = main()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from results_index import record_run
    record_run("scripts/trace_timeline.py", ROOT / "results" / "trace_timeline", _started)
    sys.exit(_rc)
