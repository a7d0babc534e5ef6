"""The store's directory made 0700 and its database 0600 where the store creates them, so that a sandboxed
submission cannot read other submissions' sources out of it (issue 32, L2; sandbox/exposure.py checks a
database that exists already). SQLite gives -wal/-shm the database's mode."""
from __future__ import annotations

import os
from pathlib import Path


def create_private_dir(d: Path) -> None:
    """`d` and any missing parent, the last one created 0700 (one that exists is left as it is)."""
    if not d.exists():
        d.mkdir(mode=0o700, parents=True, exist_ok=True)


def create_private_file(path: Path) -> None:
    """Create `path` empty and 0600 if it does not exist (O_EXCL: never over one another process made)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError:          # it exists, or cannot be made here: sqlite3 opens it or says why (StoreError)
        return
    os.close(fd)
