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


def test_a_task_directory_the_sandbox_cannot_read_is_refused_up_front_with_the_fix(capsys):
    """Issue 32: a user's task directory made by `mktemp -d` (0700, root's) cannot be read by the sandbox's
    fresh uid; every evaluation came out as `crash: the child exited with code 1 without a report`. It is
    refused before a child starts (TaskDefinitionError naming the directory and the chmod; `eval` exits 2),
    and accepted once readable."""
    import shutil
    import tempfile
    from pathlib import Path as _Path

    from kernelgym_gap.cli.main import main
    from kernelgym_gap.core.errors import TaskDefinitionError
    from kernelgym_gap.core.registry import DEFAULT_TASKS_DIR, TaskRegistry
    from kernelgym_gap.engine.pipeline import evaluate
    from kernelgym_gap.sandbox.exposure import check_task_readable, sandbox_runs_as_caller
    if sandbox_runs_as_caller():
        pytest.skip("submissions run as this user here (not root): they read what it reads")
    root = _Path(tempfile.mkdtemp(prefix="kgg-unreadable-tasks-"))          # 0700, as mktemp -d makes it
    try:
        shutil.copytree(DEFAULT_TASKS_DIR / "normalization" / "layernorm", root / "normalization" / "my_norm")
        task_py = root / "normalization" / "my_norm" / "task.py"
        task_py.write_text(task_py.read_text().replace('name="LayerNorm"', 'name="MyNorm"'))
        task = TaskRegistry(root).get("MyNorm")
        kernel = _Path(__file__).parent / "fixtures" / "failures" / "mismatch.py"
        with pytest.raises(TaskDefinitionError, match=r"cannot be read by the sandbox's user.*chmod -R o\+rX"):
            evaluate(task, kernel.read_bytes(), "triton", "cpu")
        assert main(["eval", "--tasks-dir", str(root), "--task", "MyNorm", "--backend", "cpu", str(kernel)]) == 2
        out = capsys.readouterr()
        assert str(root) in out.err and "chmod -R o+rX" in out.err and "Traceback" not in out.err + out.out
        assert "crash" not in out.out
        for p in [root, *root.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        check_task_readable(task)                                  # readable now: no error
    finally:
        shutil.rmtree(root, ignore_errors=True)
