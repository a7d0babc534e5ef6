"""Which device this process runs on, as a record and the calibration cache name it. A leaf both sides
import: the child reports it (child/run.py), the trusted calibration keys its cache by it
(judge/calibrate.py)."""
from __future__ import annotations


def device_identity() -> tuple[dict, dict]:
    import torch
    import triton
    p = torch.cuda.get_device_properties(0)
    get_driver = getattr(torch._C, "_cuda_getDriverVersion", None)
    driver = str(get_driver()) if get_driver else "?"      # the CUDA driver API version, e.g. 13000
    device = {"kind": "cuda", "name": p.name, "sm_count": p.multi_processor_count, "driver": driver,
              "l2_bytes": int(getattr(p, "L2_cache_size", 0)), "memory_bytes": int(p.total_memory),
              "capability": f"{p.major}.{p.minor}"}
    return device, {"torch": torch.__version__, "triton": triton.__version__}
