"""Where the hand-over's false verdicts come from (issue 35; docs/measurement.md, "The hand-over on the GPU: false
verdicts"). On the H100 (2026-12-07) EvalConfig.hand_over_outputs gave non_finite to honest solutions that the
files judge ok: RowSum-v2's trial 8 (1.51% of its values nan), six attention solutions, deterministic from run
to run. This script rebuilds the mechanism without the engine, layer by layer, on one task's trials:

  child (a subprocess, `--role child`): the solution called on each trial's inputs, each output kept by the
      harness's own HeldOutputs (device copies, by handle) with the checkpoints' exports where the child makes
      them (checkpoint_due), and a host copy of each output as the truth; then, for each exported record: its
      offset against the offset of the copy in its segment as torch's memory snapshot has it, and whether the
      device copy still equals the truth after the last export.
  checker (this process): the arena (judge/arena.Arena), its export's offset against the snapshot's, the real
      opener (judge/opener.py) copying every record into it (judge/opener_client.hand_over), then every view
      (judge/ipc_records.views_from_arena) against the truth, byte for byte: equal, or how many bytes differ,
      where the first is, whether the view is zeros, and whether its bytes are another output's.

A row that is wrong here says which layer; no wrong row says the cause is in the engine's wiring (the sandbox,
the timing between correctness and the hand-over), the next place to look. GPU only (CUDA IPC); the
comparison's functions are tested on cpu (tests/test_handover_diag.py). Prints a short table last:

  python scripts/probes/handover_diag.py --task RowSum --solution triton_tiled.py [--no-checkpoints] [--json out.json]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402


# ------------------------------------------------------------------------------------------ the comparisons

SENTINEL = 0xA5         # the arena's fill before the copies
MARK = "HANDOVER_DIAG "  # the child's records line

def segment_offset(snapshot: list[dict], ptr: int) -> tuple[int, int] | None:
    """(offset of `ptr` in the allocator segment that holds it, the segment's size) from
    torch.cuda.memory_snapshot()'s segments (`address`, `total_size`); None when no segment holds it."""
    for seg in snapshot:
        base, size = int(seg["address"]), int(seg["total_size"])
        if base <= ptr < base + size:
            return ptr - base, size
    return None


def compare_bytes(view: bytes, truth: bytes, others: dict[str, bytes]) -> dict:
    """How `view` (what the checker would judge) differs from `truth` (the output the solution returned):
    `equal`; else the count and first offset of differing bytes, whether the view is all zeros, and the names
    of the other outputs whose leading bytes the view is (a copy from the wrong place)."""
    if len(view) != len(truth):
        return {"equal": False, "sizes": [len(view), len(truth)]}
    if view == truth:
        return {"equal": True}
    v, t = np.frombuffer(view, dtype=np.uint8), np.frombuffer(truth, dtype=np.uint8)
    differ = np.flatnonzero(v != t)
    return {"equal": False, "bytes_differing": int(differ.size), "first_differing_byte": int(differ[0]),
            "last_differing_byte": int(differ[-1]), "fraction_differing": round(differ.size / v.size, 6),
            "view_all_zero": not v.any(),
            "view_is_the_start_of": sorted(n for n, b in others.items() if len(b) >= len(view) and
                                           b[:len(view)] == view)}


def sentinel_share(view: bytes) -> float:
    """The share of `view`'s bytes that still hold the arena's fill (SENTINEL): near 1 where no copy landed."""
    v = np.frombuffer(view, dtype=np.uint8)
    return float((v == SENTINEL).sum()) / max(v.size, 1)


def non_finite_share(t: torch.Tensor) -> float:
    """The share of `t`'s values that are inf or nan (the checker's non_finite)."""
    if not t.is_floating_point() or t.numel() == 0:
        return 0.0
    return float((~torch.isfinite(t.double())).sum()) / t.numel()


# ------------------------------------------------------------------------------------------ the child side

def driver_range(ptr: int) -> tuple[int, int] | None:
    """(base, size) of the driver's allocation holding `ptr` (cuMemGetAddressRange in this process's current
    context), or None where the driver refuses. CUDA's guide: a cudaMalloc may be sub-allocated from a larger
    block, and IPC then shares the whole block; this is where the segment's base and the driver's differ."""
    import ctypes
    try:
        drv = ctypes.CDLL("libcuda.so.1")
        base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
        fn = drv.cuMemGetAddressRange_v2
        fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
        fn.restype = ctypes.c_int
        if fn(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(int(ptr))) != 0:
            return None
        return int(base.value), int(size.value)
    except (OSError, AttributeError):
        return None


def opened_range(rt, handle_hex: str, reads: dict[str, int] | None = None, nbytes: int = 0,
                 truth: bytes = b"") -> dict:
    """What an opener in this process sees for a child's handle: the opened pointer's allocation size (the
    driver's block, which IPC maps whole), or the error; with `reads` ({label: offset}), whether the `nbytes`
    read at the opened pointer plus each offset equal `truth` (the record's offset against the driver's: which
    one a mended export should give)."""
    from kernelgym_gap.judge.cuda_ipc import CudaIpcError, handle_from_hex
    if isinstance(rt, str):                 # the runtime itself could not be had: why
        return {"open_error": rt}
    try:
        p = rt.open(handle_from_hex(handle_hex))
        try:
            base, size = rt.address_range(p)
            out = {"opened_is_base": base == p, "opened_bytes": size}
            for label, off in (reads or {}).items():
                if off is not None and off + nbytes <= size:
                    out[f"read_at_{label}_is_truth"] = rt.copy_to_host(p + off, nbytes) == truth
            return out
        finally:
            rt.close(p)
    except (CudaIpcError, OSError) as e:
        return {"open_error": str(e)[:200]}


def _entry(task, solution: Path):
    spec = importlib.util.spec_from_file_location("diag_solution", solution)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, task.entry_point)


def run_child(args) -> int:
    from kernelgym_gap.child.outputs import HeldOutputs, checkpoint_due
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.inputs import make_trial_inputs
    from kernelgym_gap.core.record import first_of_their_shape
    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.core.tensor_file import output_name, read_tensor, write_tensor
    from kernelgym_gap.engine.trials import make_trials, trial_rng
    task = default_registry().get(args.task)
    entry = _entry(task, task.directory / "solutions" / args.solution)
    cfg = EvalConfig()
    trials = make_trials(task, "cuda", cfg, trial_rng(cfg))
    out_dir, truth_dir = Path(args.dir) / "outputs", Path(args.dir) / "truth"
    out_dir.mkdir(parents=True, exist_ok=True)
    truth_dir.mkdir(parents=True, exist_ok=True)
    held = HeldOutputs(out_dir, 1 << 30, device_budget_bytes=1 << 30, by_handle=True)
    compiling = first_of_their_shape(trials)        # the calls that compile, as child/run.py has them
    covered = 0
    for k, trial in enumerate(trials):
        if args.checkpoints and checkpoint_due(trials, k, covered, compiling):
            held.write()
            covered = k
        ins = make_trial_inputs(task, trial, "cuda")
        with torch.no_grad():
            out = entry(*ins)
        torch.cuda.synchronize()
        name = output_name("trial", trial.index)
        held.add(name, out)
        write_tensor(truth_dir / name, out)
        del out, ins
    held.write()
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory_snapshot()
    copies = dict(held.held)
    rows = {}
    for name, record in held.handles.items():
        copy = copies[name]
        where = segment_offset(snapshot, copy.data_ptr())
        drv = driver_range(copy.data_ptr())
        truth_t = read_tensor(truth_dir / name, 1 << 34)
        rows[name] = {"record": {"handle": record.handle, "offset": record.offset, "nbytes": record.nbytes,
                                 "dtype": record.dtype, "shape": list(record.shape)},
                      "snapshot_offset": None if where is None else where[0],
                      "segment_bytes": None if where is None else where[1],
                      "driver_offset": None if drv is None else copy.data_ptr() - drv[0],
                      "driver_bytes": None if drv is None else drv[1],
                      "copy_equals_truth": bool(torch.equal(copy.cpu(), truth_t)),
                      "truth_file_bytes": (truth_dir / name).stat().st_size}
    trial_of = {output_name("trial", t.index): [t.index, list(t.shape), t.dtype, t.split, t.distribution]
                for t in trials}
    # one marked line: a solution or a compiler may print to stdout as well
    print(MARK + json.dumps({"rows": rows, "not_exported": held.not_exported, "trials": trial_of}), flush=True)
    sys.stdin.readline()                # held until the checker's copies are made
    return 0


# ------------------------------------------------------------------------------------------ the checker side

def run_checker(args) -> dict:
    from kernelgym_gap.core.record import OutputHandle, Trial
    from kernelgym_gap.core.tensor_file import read_tensor
    from kernelgym_gap.judge.arena import Arena
    from kernelgym_gap.judge.cuda_ipc import CudaIpcError, IpcRuntime
    from kernelgym_gap.judge.ipc_records import (ARENA_ALIGN, OutputKey, OutputKind, Plan, Planned,
                                                  views_from_arena)
    from kernelgym_gap.judge.opener_client import hand_over, start_opener
    work = Path(args.dir)
    shutil.rmtree(work, ignore_errors=True)     # the last case's truth files (write_tensor never overwrites)
    work.mkdir(parents=True)
    cmd = [sys.executable, __file__, "--role", "child", "--task", args.task, "--solution", args.solution,
           "--dir", str(work)] + ([] if args.checkpoints else ["--no-checkpoints"])
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = ""
        while not line.startswith(MARK):
            line = child.stdout.readline()
            if not line:
                raise SystemExit(f"the child ended without its records (exit {child.wait()})")
        got = json.loads(line[len(MARK):])
        entries, end = [], 0
        for name, row in sorted(got["rows"].items(), key=lambda kv: got["trials"][kv[0]][0]):
            index, shape, dtype, split, dist = got["trials"][name]
            rec = row["record"]
            record = OutputHandle(handle=rec["handle"], offset=rec["offset"], nbytes=rec["nbytes"],
                                  dtype=rec["dtype"], shape=tuple(rec["shape"]))
            off = -(-end // ARENA_ALIGN) * ARENA_ALIGN
            trial = Trial(index=index, shape=tuple(shape), dtype=dtype, seed=0, distribution=dist, split=split)
            entries.append(Planned(key=OutputKey(OutputKind.TRIAL, index), trial=trial, record=record,
                                   arena_offset=off, dtype=rec["dtype"], shape=tuple(rec["shape"])))
            end = off + record.nbytes
        plan = Plan(entries=tuple(entries), arena_bytes=-(-end // ARENA_ALIGN) * ARENA_ALIGN)
        arena = Arena.allocate(plan.arena_bytes, "cuda")
        arena.tensor.fill_(SENTINEL)        # a byte the opener never wrote reads as this
        # this wait (and a checker with no queued work) is why the diagnosis found every view right on
        # 2026-12-07 10:04 while the engine's were wrong: judge/arena.Arena.export now makes it itself
        torch.cuda.synchronize()
        exported = arena.export()
        where = segment_offset(torch.cuda.memory_snapshot(), arena.tensor.data_ptr())
        t = time.perf_counter()
        done = hand_over(start_opener(0), plan, exported["handle"], 120.0, exported["offset"])
        copy_s = time.perf_counter() - t
        results = {r.key.file_name: r.result for r in done.results}
        views = views_from_arena(arena.tensor, plan)
        # the tensor file's payload is its last nbytes (after the magic and the header)
        payload = {e.key.file_name: (work / "truth" / e.key.file_name).read_bytes()[-e.record.nbytes:]
                   for e in plan.planned}
        opened = {}                         # each output's handle opened here as the opener would, and read
        try:                                # torch's runtime, already loaded in this process
            rt = IpcRuntime(0)
        except (CudaIpcError, OSError) as e:
            rt = str(e)[:200]
        for e in plan.planned:
            row = got["rows"][e.key.file_name]
            opened[e.key.file_name] = opened_range(
                rt, e.record.handle, {"record_offset": e.record.offset, "driver_offset": row["driver_offset"]},
                e.record.nbytes, payload[e.key.file_name])
        table = []
        for e in plan.planned:
            name = e.key.file_name
            view = views[e.key]
            raw = view.contiguous().view(torch.uint8).cpu().numpy().tobytes()
            cmp = compare_bytes(raw, payload[name], {n: b for n, b in payload.items() if n != name})
            cmp["view_sentinel_share"] = round(sentinel_share(raw), 6)
            truth_t = read_tensor(work / "truth" / name, 1 << 34)
            table.append({"output": name, "trial": got["trials"][name], "copy": results.get(name),
                          "record_offset": e.record.offset, "snapshot_offset": got["rows"][name]["snapshot_offset"],
                          "segment_bytes": got["rows"][name]["segment_bytes"],
                          "driver_offset": got["rows"][name]["driver_offset"],
                          "driver_bytes": got["rows"][name]["driver_bytes"], **opened[name],
                          "child_copy_equals_truth": got["rows"][name]["copy_equals_truth"],
                          "arena_offset": e.arena_offset, "view_non_finite": round(non_finite_share(view), 6),
                          "truth_non_finite": round(non_finite_share(truth_t), 6), **cmp})
        summary = {"task": args.task, "solution": args.solution, "checkpoints": args.checkpoints,
                   "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                   "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "arena": {**{k: v for k, v in exported.items() if k != "handle"},
                             "snapshot_offset": None if where is None else where[0],
                             "segment_bytes": None if where is None else where[1]},
                   "arena_error": done.arena_error, "copy_s": round(copy_s, 4),
                   "not_exported": got["not_exported"], "rows": table}
        arena.free()
        return summary
    finally:
        if child.poll() is None:
            child.stdin.write("done\n")
            child.stdin.flush()
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()


def print_table(summary: dict) -> None:
    a = summary["arena"]
    print(f"\n== hand-over diagnosis, {summary['device']}, {summary['date']}, torch {summary['torch']}: "
          f"{summary['task']}/{summary['solution']}, checkpoints {'on' if summary['checkpoints'] else 'off'}")
    print(f"arena: export offset {a['offset']}, snapshot offset {a['snapshot_offset']} of a {a['segment_bytes']} B "
          f"segment; arena_error {summary['arena_error']}; not exported {summary['not_exported'] or 'none'}")
    head = f"{'output':<20}{'trial':<34}{'copy':<8}{'rec off':>10}{'snap off':>10}{'drv off':>10}{'seg B':>11}" \
           f"{'drv B':>11}{'opened B':>11}{'child ok':>9}" \
           f"{'equal':>7}{'differ':>9}{'first':>9}{'nonfin':>8}{'unwrit':>8}  start of"
    print(head)
    print("-" * len(head))
    for r in summary["rows"]:
        idx, shape, dtype, split, dist = r["trial"]
        what = f"{idx} {split} {'x'.join(map(str, shape))} {dtype}"
        print(f"{r['output']:<20}{what[:33]:<34}{str(r['copy'])[:7]:<8}{r['record_offset']:>10}"
              f"{str(r['snapshot_offset']):>10}{str(r['driver_offset']):>10}{str(r['segment_bytes']):>11}"
              f"{str(r['driver_bytes']):>11}{str(r.get('opened_bytes', r.get('open_error', '?'))):>11}"
              f"{str(r['child_copy_equals_truth']):>9}{str(r['equal']):>7}"
              f"{r.get('fraction_differing', 0):>9.4f}{str(r.get('first_differing_byte', '')):>9}"
              f"{r['view_non_finite']:>8.4f}{r['view_sentinel_share']:>8.4f}  "
              f"{','.join(r.get('view_is_the_start_of', []))}")
    bad = [r["output"] for r in summary["rows"] if not r["equal"]]
    sub = [r["output"] for r in summary["rows"] if r.get("opened_bytes") not in (None, r["segment_bytes"])]
    print(f"handles that open a block other than their segment (the driver's sub-allocation): {len(sub)}"
          + (f" ({', '.join(sub[:8])})" if sub else ""))
    for label in ("record_offset", "driver_offset"):
        key = f"read_at_{label}_is_truth"
        read = [r for r in summary["rows"] if key in r]
        print(f"read at the opened pointer + the {label.replace('_', ' ')}: the truth for "
              f"{sum(r[key] for r in read)} of {len(read)}")
    print(f"\nwrong views: {len(bad)} of {len(summary['rows'])}" + (f" ({', '.join(bad)})" if bad else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=("checker", "child"), default="checker")
    ap.add_argument("--task", default="RowSum")
    ap.add_argument("--solution", default="triton_tiled.py")
    ap.add_argument("--no-checkpoints", dest="checkpoints", action="store_false",
                    help="export every output once at the end, not at the child's checkpoints as well")
    ap.add_argument("--dir", default="/tmp/kgg_handover_diag")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("handover_diag needs a CUDA GPU (CUDA IPC): nothing to diagnose on this machine", file=sys.stderr)
        return 2
    if args.role == "child":
        return run_child(args)
    summary = run_checker(args)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(summary, indent=1))
    print_table(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
