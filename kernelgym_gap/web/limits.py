"""The leaderboard's request-body limits: the shared serving layer's (kernelgym_gap.serving.limits), named
here for the modules and tests that import them from web/."""
from __future__ import annotations

from kernelgym_gap.serving.limits import BodyLimit, BodyTimeout, BodyTooLarge, read_bounded, send_error

__all__ = ["BodyLimit", "BodyTimeout", "BodyTooLarge", "read_bounded", "send_error"]
