"""Issue 34: do the declared E baselines run on this GPU's torch, and agree with the reference?

For every task whose e_baseline is a named alternative (FlexAttention, torch._grouped_mm) or torch.compile,
at its first public cuda shape and each cuda dtype: the alternative's max error against the eager reference,
and both timed with triton.testing.do_bench (an independent timer, not the harness's). Prints a table last.

    python3 scripts/probes/e_baseline_check.py [--tasks A,B] [--max-tasks N]
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from kernelgym_gap.core.registry import default_registry  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="")
    ap.add_argument("--deadline-s", type=float, default=400)
    args = ap.parse_args()
    t0 = time.time()
    wanted = {t for t in args.tasks.split(",") if t}
    rows = []
    for task in default_registry():
        if task.e_baseline == "torch" or (wanted and task.name not in wanted):
            continue
        if time.time() - t0 > args.deadline_s:
            rows.append((task.name, "-", "-", "deadline", "", "", ""))
            continue
        shape = task.workloads["cuda"].public[0]
        for dtype in task.workloads["cuda"].dtypes:
            gen = torch.Generator(device="cuda").manual_seed(0)
            try:
                ins = task.make_inputs(shape, dtype, gen, task.timed_distribution, "cuda")
            except Exception:   # some generators draw on the cpu
                ins = task.make_inputs(shape, dtype, torch.Generator().manual_seed(0), task.timed_distribution, "cuda")
            name = task.e_baseline
            fn = (torch.compile(task.reference, dynamic=False) if name == "torch.compile"
                  else task.alternatives[name])
            try:
                with torch.no_grad():
                    ref = task.reference(*ins)
                    out = fn(*ins)
                    err = (out.float() - ref.float()).abs().max().item()
                    t_eager = do_bench(lambda: task.reference(*ins))
                    t_alt = do_bench(lambda: fn(*ins))
                rows.append((task.name, dtype, name, "ok", f"{err:.3g}", f"{t_eager:.4f}", f"{t_alt:.4f}"))
            except Exception as e:  # noqa: BLE001
                rows.append((task.name, dtype, name, f"{type(e).__name__}: {str(e)[:80]}", "", "", ""))
            del ins
            torch.cuda.empty_cache()
    print(f"\n== E baselines on {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print(f"{'task':26} {'dtype':9} {'baseline':15} {'status':12} {'max err':>9} {'eager ms':>9} {'alt ms':>9}")
    for r in rows:
        print(f"{r[0]:26} {r[1]:9} {r[2]:15} {r[3]:12} {r[4]:>9} {r[5]:>9} {r[6]:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
