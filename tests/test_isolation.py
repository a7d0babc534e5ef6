"""isolation.py: which directories the unshare layer hides, wherever the checkout sits. The layer itself is
started for real in test_sandbox.py (test_filesystem_view); here the choice is checked for layouts this
machine does not have (a CI runner that clones two levels down, an install under /usr)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernelgym_gap.sandbox import isolation


@pytest.mark.parametrize("checkout, parent_hidden", [
    ("/work/main", True),            # the team's machines: /work/shared beside it
    ("/builds/ci/work/main", True),  # a runner that clones deeper: its siblings are hidden too
    ("/tmp/ci/main", False),         # /tmp is hidden whole; the parent needs no tmpfs of its own
    ("/home/dev/kgg", False),        # likewise /home
    ("/opt/kgg", False),             # /opt and /var may hold what the child loads (CUDA, conda)
    ("/usr/lib/kgg", False),         # system directories are never covered
    ("/kgg", False),                 # the parent would be /
])
def test_the_checkouts_parent_is_hidden_at_any_depth(monkeypatch, checkout, parent_hidden):
    monkeypatch.setattr(isolation, "PROJECT_ROOT", Path(checkout))
    monkeypatch.setattr(isolation.os.path, "isdir", lambda p: True)
    monkeypatch.setattr(isolation.os.path, "islink", lambda p: False)
    roots = isolation._hidden_roots()
    assert (str(Path(checkout).parent) in roots) is parent_hidden, roots
    assert "/tmp" in roots and "/home" in roots
    assert not any(isolation._under(r, isolation._NEVER_HIDDEN) for r in roots if r != "/dev/shm")
