"""Exceptions raised by the harness itself.

A submission's failure is never an exception in the parent: it is a `Status` in the evaluation record.
These classes are for callers that misuse the harness (an unknown task id, a bad configuration) or for a
harness that cannot run at all (no CUDA device for the cuda backend).
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable


class KernelGymError(Exception):
    """Base class of every error the harness raises."""


def _did_you_mean(name: str, choices: Iterable[str]) -> str:
    matches = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.5)
    return f" Did you mean {', '.join(repr(m) for m in matches)}?" if matches else ""


class UnknownTaskError(KernelGymError, KeyError):
    def __init__(self, task_id: str, known: Iterable[str]):
        known = sorted(known)
        self.task_id, self.known = task_id, known
        hint = _did_you_mean(task_id, known)
        # a near match is the answer; the whole list (short names, not each id again) only without one
        names = [k for k in known if "/" not in k] or known
        tail = (f" `kernelgym-gap tasks` lists all {len(names)}." if hint
                else f" Known tasks: {', '.join(names)}")
        super().__init__(f"no task is registered as {task_id!r}.{hint}{tail}")

    def __str__(self) -> str:  # KeyError would quote the whole message
        return self.args[0]

    def __reduce__(self):      # rebuilt from its arguments where it crosses a process (a Ray actor)
        return type(self), (self.task_id, self.known)


class UnknownChoiceError(KernelGymError, ValueError):
    """A named option (dsl, backend, reward mode, agent...) that does not exist."""

    def __init__(self, what: str, value: str, choices: Iterable[str]):
        choices = list(choices)
        self.what, self.value, self.choices = what, value, choices
        super().__init__(f"unknown {what} {value!r}.{_did_you_mean(value, choices)} "
                         f"Choose one of: {', '.join(choices)}")

    def __reduce__(self):
        return type(self), (self.what, self.value, self.choices)


class ConfigConflictError(KernelGymError, ValueError):
    """An EvalConfig whose settings cannot hold together with the Placement it runs under."""


class TaskDefinitionError(KernelGymError):
    """A task file under tasks/ breaks the task contract."""


class BackendUnavailableError(KernelGymError):
    """The requested backend cannot run on this machine (e.g. cuda without a GPU)."""


class ProtocolError(KernelGymError):
    """A record or report that does not follow its schema."""


class HarnessError(KernelGymError):
    """The harness could not run an evaluation (not the submission's fault)."""
