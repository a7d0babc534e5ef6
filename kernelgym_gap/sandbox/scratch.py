"""What a child is given before it starts and what it leaves: its whole environment (an allow-list: nothing
of the parent's passes but PATH and the locale), its scratch directory (the only place it may write, handed
to its uid), and the scratch's size and entry count, which the parent reads while it runs and after it
ends (sandbox/process.py: the disk quota; special files removed before anything there is read)."""
from __future__ import annotations

import os
from pathlib import Path

from kernelgym_gap.core.registry import PROJECT_ROOT


def child_env(scratch: Path, extra: dict[str, str]) -> dict[str, str]:
    """The whole environment of a child: nothing of the parent's passes but PATH and the locale."""
    cache = scratch / "cache"
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(scratch),
        "USER": "kgg", "LOGNAME": "kgg",
        "TMPDIR": str(scratch / "tmp"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(PROJECT_ROOT),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONHASHSEED": "0",
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "TRITON_HOME": str(cache),
        "TILELANG_CACHE_DIR": str(cache / "tilelang"),
        "TILELANG_TMP_DIR": str(scratch / "tmp"),
        "TVM_FFI_CACHE_DIR": str(cache / "tvm_ffi"),
        "XDG_CACHE_HOME": str(cache),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "4",        # glibc's per-thread arenas reserve address space (RLIMIT_AS)
        "CUDA_VISIBLE_DEVICES": "",     # set to the child's GPU by run_sandboxed on the GPU path
    }
    env.update(extra)
    return env


def scratch_usage(root: Path, max_entries: int, remove_special: bool = False) -> tuple[int, int, int]:
    """(bytes allocated, entries, special entries removed) under root, not following links; stops
    counting at max_entries."""
    total = entries = removed = 0
    stack = [str(root)]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for e in it:
                entries += 1
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif remove_special and not e.is_file(follow_symlinks=False):
                    try:
                        os.unlink(e.path)
                        removed += 1
                    except OSError:
                        pass
                total += st.st_blocks * 512
                if entries > max_entries and not remove_special:
                    return total, entries, removed
    return total, entries, removed


def prepare_scratch(scratch: Path, uid: int | None) -> None:
    for sub in ("tmp", "cache"):
        (scratch / sub).mkdir(parents=True, exist_ok=True)
    if uid is not None:
        # The scratch and the folders the child writes in; the job and the source stay the parent's.
        for p in [scratch] + [scratch / s for s in ("tmp", "cache", "outputs")]:
            if p.is_dir() and not p.is_symlink():
                os.chown(p, uid, uid)
