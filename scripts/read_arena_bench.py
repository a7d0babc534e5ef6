"""The check's prefetch with and without the warm checker's read arena (Placement.read_arena_bytes;
judge/read_arena.py), side by side on this host: output files of the sizes given, in the page cache (as a child's
just-written files are), read by judge/prefetch.prefetch_outputs into fresh memory (the default) and into a kept
arena, alternately, K times each; medians and their ratio. A host figure (file reads into host memory), on
whatever host runs it: it says nothing of a GPU.

    python scripts/read_arena_bench.py [--files 24] [--mib 64] [--reps 5] [--dir /tmp] [--json out.json]

2026-12-07, Softmax's and LayerNorm's cuda jobs write 24 files, 2.1 GiB in all (the largest 128 MiB); the default
here is a lighter 24 x 64 MiB.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kernelgym_gap.core import tensor_file  # noqa: E402
from kernelgym_gap.core.record import ChildReport, Job, Trial, TrialOutcome  # noqa: E402
from kernelgym_gap.core.status import Status  # noqa: E402
from kernelgym_gap.judge.prefetch import prefetch_outputs  # noqa: E402
from kernelgym_gap.judge.read_arena import ReadArena  # noqa: E402


def make_case(root: Path, files: int, mib: int) -> tuple[Job, ChildReport, int]:
    out = root / "outputs"
    out.mkdir()
    trials, outcomes = [], []
    n = (mib << 20) // 4
    for i in range(files):
        tensor_file.write_tensor(out / f"{i}.tensor", torch.rand(n, dtype=torch.float32))
        trials.append(Trial(index=i, shape=(n,), dtype="float32", seed=i, distribution="normal", split="public"))
        outcomes.append(TrialOutcome(index=i, output_file=f"{i}.tensor", launches=1, programs=1, seconds=0.0,
                                     input_digest_before="x", input_digest_after="x"))
    job = Job(task_id="bench", dsl="triton", backend="cpu", source_file=str(root / "s.py"), outputs_dir=str(out),
              report_file=str(root / "r.json"), trials=tuple(trials), timing=None)
    return job, ChildReport(status=Status.OK, message="", trials=tuple(outcomes)), files * (n * 4)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=24)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where the files go (default: the system's temp)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="kgg-arena-bench-", dir=args.dir) as d:
        job, report, total = make_case(Path(d), args.files, args.mib)
        bound = total + args.files * 4096              # the files with their headers
        arena = ReadArena(min(bound, 16 << 30))
        into = functools.partial(tensor_file.read_tensor, into=arena.take)
        arena.reset()
        prefetch_outputs(job, report, max_bytes=bound, read=into)      # the first evaluation: fresh, sized
        fresh_s, kept_s = [], []
        for _ in range(args.reps):
            t = time.perf_counter()
            got = prefetch_outputs(job, report, max_bytes=bound)
            fresh_s.append(time.perf_counter() - t)
            assert len(got.files) == args.files
            del got
            arena.reset()
            t = time.perf_counter()
            got = prefetch_outputs(job, report, max_bytes=bound, read=into)
            kept_s.append(time.perf_counter() - t)
            assert len(got.files) == args.files and arena.fresh == 0
            del got
    fresh, kept = statistics.median(fresh_s), statistics.median(kept_s)
    row = {"host_cpus": os.cpu_count(), "files": args.files, "mib_each": args.mib, "total_mib": total >> 20,
           "reps": args.reps, "fresh_p50_s": round(fresh, 4), "arena_p50_s": round(kept, 4),
           "speedup": round(fresh / kept, 2), "fresh_gib_s": round(total / 2**30 / fresh, 2),
           "arena_gib_s": round(total / 2**30 / kept, 2)}
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=1) + "\n")
    print("== the check's prefetch: fresh memory against the read arena (a host figure, this host)")
    keys = list(row)
    print("  ".join(k.ljust(max(len(k), len(str(row[k])))) for k in keys))
    print("  ".join(str(row[k]).ljust(max(len(k), len(str(row[k])))) for k in keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
