"""Timing by CUDA-graph replay (issue 35; cuda backend; used when TimingConfig.graph_replay is on). Never prints.

For each input set, one call of the callable is captured into a CUDA graph, with the L2 flush before it and the
two timing events around it captured as external event nodes (torch.cuda.Event(external=True)). A repetition
is then one `replay()`: the flush, the start event, the call's kernels and the end event reach the GPU as one
submission, so no Python of the submission runs between the events, the host's launch cost is not between
them, and no spin kernel is needed to hide it (child/timing.Bench._rep needs one). The readings are the same
two as the loop's (on the stream, and device-wide after a synchronize) and the parent recomputes everything
from them as before (core/timing_stats.py); Readings.method says "graph".

A graph is used only when it is as good as the call it stands for; otherwise the loop times that callable and
Readings.fallback says why (the parent records it; it changes no verdict):
- the capture raised (a synchronize, a host read, an allocation the capture forbids, work on a stream not
  joined back, a torch without external events: torch.cuda.Event's `external` came in 2.7);
- the captured call returned no tensor;
- the replay's output is not bit-identical to an ordinary call's on the same inputs (a submission that behaves
  differently while captured; a nondeterministic kernel also lands here, and is timed by the loop).
While capturing, the launch watch's expected stream is the capture stream (dsl/base.StreamWatch: "timing code
may set it to its own"); it is put back afterwards, whatever happened.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from kernelgym_gap.core import timing_stats as stats

Repeater = Callable[[int], tuple[float, float]]


def select(cfg, capture: Callable[[], object]) -> tuple[object | None, str]:
    """Which way a callable is timed: (the capture's timer, "") to replay graphs, or (None, why not) for the
    loop. `capture` returns a timer, or a string saying why there is none, or raises. Without
    cfg.graph_replay nothing is captured and there is no note (the loop is what was asked for)."""
    if not getattr(cfg, "graph_replay", False):
        return None, ""
    try:
        timer = capture()
    except Exception as e:  # noqa: BLE001 - any failure to capture means the loop, with the reason kept
        timer = f"the capture failed: {type(e).__name__}: {e}"
    if isinstance(timer, str) or timer is None:
        return None, _note(timer or "the capture gave nothing")
    return timer, ""


def _note(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= stats.MAX_NOTE_CHARS else text[:stats.MAX_NOTE_CHARS - 3] + "..."


class GraphTimer:
    """The captured graphs of one callable, one per input set, and their repetition (`rep`)."""

    def __init__(self, graphs: list, sync_overhead_ms: float):
        self.graphs, self.sync_overhead_ms = graphs, sync_overhead_ms

    def rep(self, i: int) -> tuple[float, float]:
        """One repetition on input set i % n: (stream reading, device-wide reading) in ms, as Bench._rep."""
        import torch
        graph, start, end, _ = self.graphs[i % len(self.graphs)]
        end_device = torch.cuda.Event(enable_timing=True)
        graph.replay()
        torch.cuda.synchronize()
        end_device.record()
        torch.cuda.synchronize()
        s = stats.round_ms(start.elapsed_time(end))
        return s, max(stats.round_ms(start.elapsed_time(end_device) - self.sync_overhead_ms), s)

    def close(self, keep: Callable[[object], None] | None = None) -> None:
        """Lets the graphs and their memory pool go (the next callable's capture must not inherit them). `keep`
        (child/release.TimedCalls.keep) takes the captured calls' outputs first, so that their last release,
        submission code, runs under watch with the rest of the timed outputs, not here."""
        if keep is not None:
            for graph in self.graphs:
                keep(graph[3])
        self.graphs = []


class GraphReplay:
    """Mixed in before the Bench (child/timing.GraphBench): its full timings (`measure_interleaved`) take each
    callable's repetitions by graph replay where `select` allows, the rest by the Bench's own loop; its probe
    stays the loop (a hopeless kernel is told from its first calls, before anything is captured). `watch` is
    the adapter's StreamWatch (set by time_submission)."""
    watch = None

    def measure_interleaved(self, fns):
        ways = [select(self.cfg, lambda fn=fn: self._capture(fn)) for fn in fns]
        self._timers = {id(fn): timer for fn, (timer, _) in zip(fns, ways) if timer is not None}
        try:
            measured = super().measure_interleaved(fns)
        finally:
            for fn in fns:
                timer = self._timers.get(id(fn))
                keep = getattr(fn, "keep", None)    # child/release.TimedCalls (the kernel's): it takes the outputs
                if timer is not None:
                    timer.close(keep) if keep is not None else timer.close()
            self._timers = {}
        return [dataclasses.replace(m, readings=dataclasses.replace(
                    m.readings, method="loop" if timer is None else "graph", fallback=note))
                for m, (timer, note) in zip(measured, ways)]

    def _capture(self, fn):
        return GraphCapture(self, self.watch).capture(fn, self.cfg.n_input_sets)

    def _rep(self, fn, i):
        timer = getattr(self, "_timers", {}).get(id(fn))
        return timer.rep(i) if timer is not None else super()._rep(fn, i)


class GraphCapture:
    """Captures a callable's graphs for a Bench (its flush buffer and synchronize cost) under the adapter's
    launch watch (`watch`: a dsl.base.StreamWatch, or None)."""

    def __init__(self, bench, watch=None):
        self.bench, self.watch = bench, watch

    def capture(self, fn: Callable[[int], object], n_sets: int) -> GraphTimer | str:
        import torch
        try:
            events = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(2 * n_sets)]
        except TypeError:
            return f"torch {torch.__version__} has no external CUDA events (torch.cuda.Event(external=True))"
        stream = torch.cuda.Stream()
        previous = self.watch.expected if self.watch is not None else None
        graphs = []
        torch.cuda.synchronize()
        try:
            for k in range(n_sets):
                graph, start, end = torch.cuda.CUDAGraph(), events[2 * k], events[2 * k + 1]
                stream.wait_stream(torch.cuda.current_stream())
                if self.watch is not None:
                    self.watch.expected = stream.cuda_stream
                with torch.cuda.graph(graph, stream=stream):
                    if self.bench.cfg.flush_l2:
                        self.bench.flush.zero_()
                    start.record()
                    out = fn(k)
                    end.record()
                if type(out) is not torch.Tensor:
                    return f"the captured call returned {type(out).__name__}, not a tensor"
                graphs.append((graph, start, end, out))
        finally:
            if self.watch is not None:
                self.watch.expected = previous
            torch.cuda.synchronize()
        for k, (graph, _, _, out) in enumerate(graphs):
            graph.replay()
            eager = fn(k)
            torch.cuda.synchronize()
            if type(eager) is not torch.Tensor or not torch.equal(out, eager):
                return "the graph's replay did not give the same output as a call on the same inputs"
        return GraphTimer(graphs, self.bench.sync_overhead_ms)
