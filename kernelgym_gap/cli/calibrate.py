"""`kernelgym-gap calibrate`: measure the GPU's ceilings (judge/calibrate.py) and print them."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from kernelgym_gap.judge.calibrate import calibrate, default_cache_path


def add_commands(sub) -> None:
    s = sub.add_parser("calibrate", help="measure the GPU's copy, read and write bandwidth and matmul peaks "
                                         "(cached per device)")
    s.add_argument("--gpu", type=int, default=0, help="index of the GPU to measure")
    s.add_argument("--json", action="store_true", help="print the calibration as one JSON object")
    s.add_argument("--cache", help=f"cache file (default {default_cache_path()})")
    s.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args) -> int:
    cal = calibrate(args.gpu, Path(args.cache) if args.cache else None, force=True)
    if args.json:
        print(json.dumps(dataclasses.asdict(cal)))
        return 0
    print(f"{cal.device_name} ({cal.source}, {cal.measured_at})")
    print(f"  copy bandwidth   {cal.copy_bytes_per_s / 1e12:7.2f} TB/s (read + write)")
    for what, rate in (("read", cal.read_bytes_per_s), ("write", cal.write_bytes_per_s)):
        if rate is not None:
            print(f"  {what:5s} bandwidth  {rate / 1e12:7.2f} TB/s ({what} only)")
    for k, v in cal.matmul_flops_per_s.items():
        print(f"  matmul {k:9s} {v / 1e12:7.1f} TFLOP/s")
    return 0
