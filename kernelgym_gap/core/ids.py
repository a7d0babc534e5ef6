"""Task ids: `kernelgym_gap/<Name>-v<version>`, the Gymnasium namespace and the one place ids are parsed."""
from __future__ import annotations

import re

NAMESPACE = "kernelgym_gap"
PREFIX = NAMESPACE + "/"
SUITE_ID = f"{NAMESPACE}/Suite-v0"

_ID = re.compile(r"^(?:kernelgym_gap/)?(?P<name>[A-Za-z0-9_]+?)(?:-v(?P<version>\d+))?$")


def task_id(name: str, version: int) -> str:
    return f"{PREFIX}{name}-v{version}"


def short(task_id_: str) -> str:
    """`kernelgym_gap/LayerNorm-v1` -> `LayerNorm-v1` (what pages and tables show)."""
    return task_id_.removeprefix(PREFIX)


def full(slug: str) -> str:
    """`LayerNorm-v1` or `kernelgym_gap/LayerNorm-v1` -> `kernelgym_gap/LayerNorm-v1`."""
    return slug if slug.startswith(PREFIX) else PREFIX + slug


def parse(text: str) -> tuple[str, int | None] | None:
    """(name, version or None) of an id or bare name; None when it is neither."""
    m = _ID.match(text.strip())
    if not m:
        return None
    return m.group("name"), int(m.group("version")) if m.group("version") else None
