"""What the child says of itself and of a submission's outputs in its report: the device and the versions it
ran with, an output's exact type and whether it shares storage with an input, and the report's atomic write.
Bound by child/run.py before the submission is loaded (a name looked up in sys.modules later could be the
submission's replacement)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch


def write_report(path: Path, report) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(report.to_json())
    os.replace(tmp, path)


def device_info(backend: str) -> dict:
    if backend != "cuda":
        return {"kind": "cpu", "name": "cpu (Triton interpreter / TileLang C target)"}
    from kernelgym_gap.device.identity import device_identity
    return device_identity()[0]


def versions(adapter) -> dict:
    v = {"python": sys.version.split()[0], "torch": torch.__version__}
    v.update(type(adapter).versions())
    if torch.version.cuda:
        v["cuda"] = torch.version.cuda
    return v


def aliases_an_input(out, inputs) -> bool:
    ptr = out.untyped_storage().data_ptr()
    size = out.untyped_storage().nbytes()
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.device == out.device:
            p, n = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
            if ptr < p + n and p < ptr + size:
                return True
    return False


def type_name_of(out) -> str:
    if type(out) is torch.Tensor:
        return "torch.Tensor"
    cls = type(out)
    name = f"{type.__getattribute__(cls, '__module__')}.{type.__getattribute__(cls, '__qualname__')}"
    return name if name != "torch.Tensor" else "torch.Tensor (a different class under the same name)"


def is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)
