"""Every evaluation's stages on a timeline, from a records file or from the simulator alike: Chrome/Perfetto
trace JSON ("traceEvents", complete events `ph: "X"`, microseconds) and a PNG.

In the trace each GPU is a process (pid = GPU index) and each slot a thread (tid = slot + 1) carrying its
evaluations' stages; the lane's holds are two more threads of the GPU (tid 1000: exclusive, 1001: shared), so a
reader sees the lane alternate and where the waits are. Open the JSON in https://ui.perfetto.dev or
chrome://tracing.

A record holds durations, not start times (scripts/throughput.py writes `at_s`, the end, and `latency`), so its
stages are laid out from its start (at_s - total) in the pipeline's order, each for its recorded duration: the
same rebuild as scripts/lane_occupancy.py, with the same approximation (unrecorded gaps move a stage by up to
a second or so). Slots are rebuilt too: an evaluation takes the slot whose last evaluation ended as it
started."""
from __future__ import annotations

import json
from pathlib import Path

from kernelgym_gap.sim.engine import Interval

TID_EXCLUSIVE, TID_SHARED = 1000, 1001
ROW_TID = {"slot": 1, "pre-start": 101, "checker": 201}     # + the slot: a row's thread

# (stage, latency key, lane) in the pipeline's order; the lane waits are waits
RECORD_STAGES = (
    ("gate", "gate", ""),
    ("child start / hand-off", "_handoff", ""),
    ("setup", "child_setup", ""),
    ("import", "child_import", ""),
    ("wait shared", "child_lane_wait_shared", ""),
    ("correctness", "child_correctness", "shared"),
    ("wait exclusive", "child_lane_wait_exclusive", ""),
    ("timing", "child_timing", "exclusive"),
    ("wait shared (recheck)", "child_lane_wait_recheck", ""),   # TimingConfig.recheck_outside_exclusive's
    ("recheck", "child_recheck", "shared"),                     # rechecks, after the timing
    ("outputs write", "child_outputs_write", ""),
    ("child misc", "_misc", ""),
    ("parent", "_rest", ""),           # the record's time outside gate, child and check; put here so that
    ("check prefetch", "check_prefetch", ""),              # the check ends at at_s, as lane_occupancy.py has it;
    ("wait shared (check)", "check_lane_wait", ""),        # its outputs read first, with no lane (EvalConfig.
                                                           # read_outputs_outside_lane), then the wait
    ("check", "_check_body", "shared"),
)


def _slots(records: list[dict]) -> list[int]:
    """A slot per record: the slot whose last evaluation ended closest before this one started."""
    order = sorted(range(len(records)), key=lambda i: records[i]["at_s"] - records[i]["latency"].get("total", 0.0))
    free_at: list[float] = []
    out = [0] * len(records)
    for i in order:
        start = records[i]["at_s"] - records[i]["latency"].get("total", 0.0)
        ready = [s for s, t in enumerate(free_at) if t <= start + 0.15]
        if ready:
            slot = max(ready, key=lambda s: free_at[s])
        else:
            slot = len(free_at)
            free_at.append(0.0)
        free_at[slot] = records[i]["at_s"]
        out[i] = slot
    return out


def intervals_from_records(records: list[dict]) -> list[Interval]:
    """The stages of every record (one mode's) as intervals on the run's clock."""
    out: list[Interval] = []
    slots = _slots(records)
    reach: dict[tuple[int, int], float] = {}     # the last stage's end per slot: the rounding of at_s (10 ms)
    # and of the latencies (1 ms) can make consecutive records overlap by a few ms, which a trace viewer
    # would draw as wrongly nested: such a start is clipped to the previous end
    for n in sorted(range(len(records)), key=lambda i: records[i]["at_s"] - records[i]["latency"].get("total", 0.0)):
        r, slot = records[n], slots[n]
        lat = dict(r["latency"])
        g = lambda k: float(lat.get(k, 0.0) or 0.0)     # noqa: E731
        inner = ("child_setup", "child_import", "child_lane_wait_shared", "child_correctness",
                 "child_lane_wait_exclusive", "child_timing", "child_lane_wait_recheck", "child_recheck",
                 "child_outputs_write")
        lat["_handoff"] = max(0.0, g("child") - g("child_total")) if "child_total" in lat else g("child")
        lat["_misc"] = max(0.0, g("child_total") - sum(g(k) for k in inner))
        lat["_check_body"] = max(0.0, g("check") - g("check_lane_wait") - g("check_prefetch"))
        lat["_rest"] = max(0.0, g("total") - g("gate") - g("child") - g("check"))
        t = r["at_s"] - g("total")
        name = r.get("submission") or r.get("task", "?")
        gpu = int(r.get("gpu", 0) or 0)
        if "child_total" not in lat:           # killed at a stage deadline: the child's time, no stages known
            spans = [("hung", g("gate"), g("child"), "")]
        else:                                  # (stage, time before it, its duration, its lane)
            spans = [(stage, 0.0, g(key), lane) for stage, key, lane in RECORD_STAGES if g(key) > 0]
        for stage, skip, d, lane in spans:
            t += skip
            start = max(t, reach.get((gpu, slot), t))
            if t + d > start:
                out.append(Interval(job=n, name=name, gpu=gpu, slot=slot, stage=stage, start=start, end=t + d,
                                    lane=lane, wait=stage.startswith("wait")))
                reach[(gpu, slot)] = t + d
            t += d
    return sorted(out, key=lambda iv: (iv.job, iv.start))


def chrome_trace(intervals: list[Interval], title: str = "") -> dict:
    events: list[dict] = []
    gpus = sorted({iv.gpu for iv in intervals})
    for g in gpus:
        events.append({"ph": "M", "name": "process_name", "pid": g, "tid": 0, "args": {"name": f"GPU {g}"}})
        for tid, label in ((TID_EXCLUSIVE, "lane: exclusive"), (TID_SHARED, "lane: shared")):
            events.append({"ph": "M", "name": "thread_name", "pid": g, "tid": tid, "args": {"name": label}})
        for row, s in sorted({(iv.row, iv.slot) for iv in intervals if iv.gpu == g}):
            label = f"slot {s}" if row == "slot" else f"slot {s} {row}"
            events.append({"ph": "M", "name": "thread_name", "pid": g, "tid": ROW_TID.get(row, 1) + s,
                           "args": {"name": label}})
    for iv in sorted(intervals, key=lambda i: (i.start, i.gpu, i.slot)):
        ev = {"ph": "X", "name": iv.stage, "cat": "wait" if iv.wait else (iv.lane or "host"), "pid": iv.gpu,
              "tid": ROW_TID.get(iv.row, 1) + iv.slot, "ts": round(iv.start * 1e6),
              "dur": max(1, round((iv.end - iv.start) * 1e6)),
              "args": {"evaluation": iv.name, "job": iv.job}}
        events.append(ev)
        if iv.lane in ("shared", "exclusive"):
            events.append({**ev, "name": f"{iv.stage}: {iv.name}", "cat": iv.lane,
                           "tid": TID_EXCLUSIVE if iv.lane == "exclusive" else TID_SHARED})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"title": title}}


def write_trace(intervals: list[Interval], path: str | Path, title: str = "") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(chrome_trace(intervals, title), separators=(",", ":")) + "\n")
    return path


COLOURS = {"correctness": "tab:blue", "timing": "tab:red", "check": "tab:green", "outputs write": "tab:purple",
           "setup": "tab:gray", "child start / hand-off": "tab:olive", "cold child start": "tab:olive",
           "hand-off": "tab:olive", "compile (unlaned)": "tab:cyan", "check reference (early)": "tab:orange",
           "preimport": "tab:pink", "cuda context": "tab:pink", "hung": "black", "recheck": "gold"}


def write_png(intervals: list[Interval], path: str | Path, title: str = "") -> Path | None:
    """One row per slot, and the lane's two rows, per GPU; waits hatched light grey. None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        return None
    rows = sorted({(iv.gpu, iv.slot) for iv in intervals})     # the pre-start and checker rows join their slot's
    gpus = sorted({g for g, _ in rows})
    labels, y = [], {}
    for g in gpus:
        for tag in ("exclusive", "shared"):
            y[(g, tag)] = len(labels)
            labels.append(f"GPU {g} lane: {tag}")
        for _, s in [r for r in rows if r[0] == g]:
            y[(g, s)] = len(labels)
            labels.append(f"GPU {g} slot {s}")
    fig, ax = plt.subplots(figsize=(14, 0.45 * len(labels) + 1.5))
    for iv in intervals:
        colour = "lightgrey" if iv.wait else COLOURS.get(iv.stage, "tab:brown")
        top, height = (-0.4, 0.8) if iv.row == "slot" else (0.25, 0.15)     # the overlapping rows: a thin bar
        ax.broken_barh([(iv.start, iv.end - iv.start)], (y[(iv.gpu, iv.slot)] + top, height), facecolors=colour,
                       hatch="//" if iv.wait else None, edgecolor="white", linewidth=0.3)
        if iv.lane in ("shared", "exclusive"):
            ax.broken_barh([(iv.start, iv.end - iv.start)], (y[(iv.gpu, iv.lane)] - 0.4, 0.8),
                           facecolors=COLOURS.get(iv.stage, "tab:brown"), alpha=0.35, edgecolor="none")
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the run's start")
    ax.set_title(title)
    used = sorted({iv.stage for iv in intervals if not iv.wait})
    handles = [Patch(facecolor=COLOURS.get(s, "tab:brown"), label=s) for s in used]
    handles.append(Patch(facecolor="lightgrey", hatch="//", label="waiting"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=6, fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
