"""Device ceilings, measured on the device: copy, read-only and write-only bandwidth, and dense matmul peak
per dtype. The floor (judge/floor.py) uses the fastest of the three rates, and the read and write rates for
a task's read and written bytes: an honest kernel can move bytes faster than a device-to-device copy does.

`kernelgym-gap calibrate` runs the measurement in a child process (the parent never holds a CUDA
context) and caches the result per device (name, driver, torch and triton versions). Every roofline uses
the cached numbers; datasheet numbers are only a labelled fallback (`source: "datasheet"`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from kernelgym_gap.core.errors import BackendUnavailableError, HarnessError
from kernelgym_gap.core.lane import held
from kernelgym_gap.device.identity import device_identity

COPY_BYTES = 1 << 30
MATMUL_SIZES = {"bfloat16": 8192, "float16": 8192, "tf32": 8192, "float32": 4096}

# Vendor figures for devices seen here, as a labelled fallback only (dense, no sparsity).
DATASHEET = {
    "NVIDIA H200": {"copy_bytes_per_s": 4.8e12,
                    "matmul_flops_per_s": {"bfloat16": 989e12, "float16": 989e12, "tf32": 494e12, "float32": 67e12}},
    "NVIDIA H100 80GB HBM3": {"copy_bytes_per_s": 3.35e12,
                              "matmul_flops_per_s": {"bfloat16": 989e12, "float16": 989e12, "tf32": 494e12,
                                                     "float32": 67e12}},
}


@dataclasses.dataclass(frozen=True)
class Calibration:
    device_key: str
    device_name: str
    copy_bytes_per_s: float                   # bytes read + written per second, device-to-device copy
    matmul_flops_per_s: dict[str, float]      # "float32", "tf32", "float16", "bfloat16"
    source: str                               # "measured" or "datasheet"
    measured_at: str = ""
    spreads: dict[str, float] = dataclasses.field(default_factory=dict)
    # bytes per second of a read-only reduction (torch.sum) and of a write-only fill (fill_); None in a
    # calibration cached before they were measured, and in the datasheet fallback (see `complete`)
    read_bytes_per_s: float | None = None
    write_bytes_per_s: float | None = None

    @property
    def complete(self) -> bool:
        """Whether it holds every rate a measurement gives (a measured calibration cached before the read and
        write rates were measured is not: its floor is copy-only until `kernelgym-gap calibrate` runs again)."""
        return self.source != "measured" or (self.read_bytes_per_s is not None and self.write_bytes_per_s is not None)

    def peak_for(self, dtype: str) -> float:
        """The fastest dense rate a kernel of this dtype could legitimately use (fp32 may use tf32)."""
        if dtype == "float32":
            return max(self.matmul_flops_per_s.get("tf32", 0.0), self.matmul_flops_per_s["float32"])
        return self.matmul_flops_per_s[dtype]


def device_key(device: dict, versions: dict) -> str:
    return "|".join([device.get("name", "?"), str(device.get("driver", "?")), versions.get("torch", "?"),
                     versions.get("triton", "?")])


def cache_dir() -> Path:
    """Where per-device measurements are cached ($XDG_CACHE_HOME/kernelgym_gap, else ~/.cache/kernelgym_gap)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kernelgym_gap"


def default_cache_path() -> Path:
    return cache_dir() / "calibration.json"


def load_cached(key: str, path: Path | None = None) -> Calibration | None:
    path = path or default_cache_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    entry = data.get(key)
    return Calibration(**entry) if entry else None


def _read_or_empty(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def update_cache(path: Path, change: Callable[[dict], None], read: Callable[[Path], dict] = _read_or_empty,
                 indent: int = 1, sort_keys: bool = True) -> None:
    """One writer's change to a JSON cache under the cache directory (calibration, torch.compile baselines,
    library times): `read(path)` (default: {} when missing or unparsable), `change(data)` in place, and the
    file replaced whole, under an exclusive flock on a lock file beside it, so that writers side by side
    (evaluations on lanes) lose no entry. Readers need no lock: they only ever see a whole file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = read(path)
            change(data)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=indent, sort_keys=sort_keys))
            os.replace(tmp, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def save_cached(cal: Calibration, path: Path | None = None) -> None:
    update_cache(path or default_cache_path(),
                 lambda data: data.__setitem__(cal.device_key, dataclasses.asdict(cal)), indent=2, sort_keys=False)


def datasheet(device: dict, versions: dict) -> Calibration | None:
    sheet = DATASHEET.get(device.get("name", ""))
    if sheet is None:
        return None
    return Calibration(device_key=device_key(device, versions), device_name=device["name"],
                       copy_bytes_per_s=sheet["copy_bytes_per_s"],
                       matmul_flops_per_s=dict(sheet["matmul_flops_per_s"]), source="datasheet")


# ------------------------------------------------------------------------------------- in the child

def measure() -> Calibration:
    """Runs on the GPU: the same event-based summariser as kernel timing."""
    import datetime
    import torch
    from kernelgym_gap.core.record import TimingConfig
    from kernelgym_gap.device.bench import Bench
    device, versions = device_identity()
    bench = Bench(TimingConfig(min_reps=10, max_reps=50, budget_ms=3000, warmup_ms=100, target_spread=0.01))
    src = torch.empty(COPY_BYTES // 2, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    m = bench.measure(lambda i: dst.copy_(src))
    copy_bps = COPY_BYTES / (m.median_ms * 1e-3)
    spreads = {"copy": m.spread}
    del src, dst
    # read-only: a reduction of COPY_BYTES to one value; write-only: a fill of COPY_BYTES (a kernel, not a
    # memset: kernels write through the same path)
    buf = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device="cuda").uniform_()
    r = bench.measure(lambda i: buf.sum())
    w = bench.measure(lambda i: buf.fill_(1.0 + i % 2))
    read_bps, write_bps = COPY_BYTES / (r.median_ms * 1e-3), COPY_BYTES / (w.median_ms * 1e-3)
    spreads.update(read=r.spread, write=w.spread)
    del buf
    flops = {}
    for name, n in MATMUL_SIZES.items():
        dtype = torch.float32 if name in ("tf32", "float32") else getattr(torch, name)
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        try:
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            mm = bench.measure(lambda i: torch.mm(a, b))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
        flops[name] = 2 * n ** 3 / (mm.median_ms * 1e-3)
        spreads[name] = mm.spread
        del a, b
    torch.cuda.empty_cache()
    return Calibration(device_key=device_key(device, versions), device_name=device["name"],
                       copy_bytes_per_s=copy_bps, matmul_flops_per_s=flops, source="measured",
                       measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       spreads=spreads, read_bytes_per_s=read_bps, write_bytes_per_s=write_bps)


# ------------------------------------------------------------------------------------ in the parent

def calibrate(gpu_index: int = 0, cache_path: Path | None = None, force: bool = False,
              key: str | None = None, lane_dir: str | None = None) -> Calibration:
    """The cached calibration for this device, measured in a child process when missing (or forced); with
    `lane_dir`, while it holds the GPU's lane exclusive (core/lane.py: a measurement never shares the GPU)."""
    if key is not None and not force:
        cached = load_cached(key, cache_path)
        if cached is not None:
            return cached
    with tempfile.TemporaryDirectory(prefix="kgg-cal-") as tmp:
        out = Path(tmp) / "cal.json"
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu_index))
        with held(lane_dir, gpu_index, "exclusive"):
            proc = subprocess.run([sys.executable, "-m", "kernelgym_gap.judge.calibrate", "--child", str(out)],
                                  env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or not out.is_file():
            tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
            if "no CUDA device" in proc.stderr:
                raise BackendUnavailableError("calibration needs an NVIDIA GPU; this machine has none")
            raise HarnessError(f"calibration failed:\n{tail}")
        cal = Calibration(**json.loads(out.read_text()))
    save_cached(cal, cache_path)
    return cal


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        import torch
        if not torch.cuda.is_available():
            print("no CUDA device", file=sys.stderr)
            sys.exit(3)
        Path(sys.argv[2]).write_text(json.dumps(dataclasses.asdict(measure())))
        sys.exit(0)
    print("usage: python -m kernelgym_gap.judge.calibrate --child OUT.json", file=sys.stderr)
    sys.exit(2)
