"""Host cost of child/release.TimedCalls (issue 35, 2026-12-07): letting KEEP_CALLS kept outputs go under the
guards and op recorders, and a call through TimedCalls against a bare lambda. CPU tensors (no device here): on
cuda the tensors go back to torch's caching allocator, which is not slower. Prints medians and p90s.

    .venv/bin/python scripts/probes/release_cost.py
"""
import time
import types

import torch

from kernelgym_gap.child import release


def main(rounds: int = 300, calls_n: int = 20000) -> None:
    log = types.SimpleNamespace(launches=0)
    x = torch.zeros(1024)
    calls = release.TimedCalls(lambda t: t.clone(), [(x,)], log)
    spans = []
    for _ in range(rounds):
        for _ in range(release.KEEP_CALLS):
            release.TimedCalls.keep(calls, x.clone())
        t = time.perf_counter()
        release.TimedCalls.release(calls)
        spans.append(time.perf_counter() - t)
    spans.sort()
    print(f"release of {release.KEEP_CALLS} kept outputs: p50 {spans[len(spans) // 2] * 1e6:.1f} us, "
          f"p90 {spans[int(len(spans) * 0.9)] * 1e6:.1f} us")
    bare = lambda i: x.clone()     # noqa: E731 - what time_submission passed the bench before
    for name, fn in (("bare lambda", bare), ("TimedCalls", release.TimedCalls(lambda t: t.clone(), [(x,)], log))):
        t = time.perf_counter()
        for i in range(calls_n):
            fn(i)
        print(f"{name}: {(time.perf_counter() - t) / calls_n * 1e6:.2f} us a call (release amortized)")


if __name__ == "__main__":
    main()
