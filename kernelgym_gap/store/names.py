"""The submitter name rule, one for every entrance that names a submitter for the leaderboard (the CLI's
`submit --name`, the web form and `POST /api/submissions`): checked before anything is evaluated or stored,
refused with the same message everywhere. The store itself only insists on a non-empty name (agents and
batch runs name themselves)."""
from __future__ import annotations

import re

from kernelgym_gap.core.errors import KernelGymError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._:@/+()-]{0,99}$")
NAME_RULE = ("name must be 1-100 characters: letters, digits, space and ._:@/+()- "
             "(starting with a letter or digit)")


class InvalidName(KernelGymError, ValueError):
    """A submitter name the leaderboard refuses (the CLI exits 2, the web answers 422)."""


def submitter_name(raw) -> str:
    """The name, stripped of surrounding blanks, or InvalidName with NAME_RULE."""
    name = raw.strip() if isinstance(raw, str) else ""
    if not NAME_RE.match(name):
        raise InvalidName(NAME_RULE)
    return name


def require_nonempty(submitter) -> None:
    """The store's own rule (every writer): a non-empty string."""
    if not isinstance(submitter, str) or not submitter.strip():
        raise ValueError("submitter must be a non-empty name (agent or checkpoint)")
