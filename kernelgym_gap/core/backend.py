"""The backends and what each can measure: decided here once.

  cuda  real measurement on an NVIDIA GPU: correctness, timing, E, U, roofline, the full reward
  cpu   the Triton interpreter and TileLang's C target: correctness only. No CPU time is ever passed off as a
        GPU figure, so the performance terms stay absent and the reward is the correctness gate.
"""
from __future__ import annotations

import dataclasses

from kernelgym_gap.core.errors import BackendUnavailableError, UnknownChoiceError

BACKENDS = ("cpu", "cuda")


@dataclasses.dataclass(frozen=True)
class Backend:
    name: str
    device: str                 # where trial inputs live (torch device type)
    measures_time: bool         # GPU timing and the performance terms (E, U, roofline, diagnosis)

    def reward_mode(self, configured: str) -> str:
        """The reward mode an evaluation on this backend runs in: the configured one where time is
        measured, the correctness gate alone elsewhere."""
        return configured if self.measures_time else "correctness"


_BACKENDS = {"cpu": Backend("cpu", "cpu", measures_time=False), "cuda": Backend("cuda", "cuda", measures_time=True)}


def backend(name: str) -> Backend:
    if name not in _BACKENDS:
        raise UnknownChoiceError("backend", name, BACKENDS)
    return _BACKENDS[name]


def resolve_backend(name: str) -> str:
    """"auto" -> cuda where a GPU and a CUDA build of torch are present, else cpu; "cuda" on a machine
    without one raises BackendUnavailableError."""
    if name == "auto":
        import torch
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name not in BACKENDS:
        raise UnknownChoiceError("backend", name, BACKENDS + ("auto",))
    if name == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise BackendUnavailableError("the cuda backend needs an NVIDIA GPU and a CUDA build of torch; "
                                          "this machine has none (use --backend cpu)")
    return name
