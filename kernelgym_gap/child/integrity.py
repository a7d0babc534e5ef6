"""Integrity inside the child: what the submission may not do while its code runs, and what it may not have
changed once it returns. Imported only inside the child (`run.py`); one facade over four modules.

All of it is in-process and so, in principle, defeatable by a submission that sets out to find and patch it
(ctypes, gc): the OS layers in sandbox/ and the parent's own checks are the real boundary. docs/security.md
says what each part stops and what it does not.

- watch.py, `WATCH`: whether submission code is running now (`submission_code()`: the import, each entry
  call, and the release of what it returned), and whether the DSL's own machinery is running inside it
  (`dsl_region()`: a kernel launch or compilation, entered by the adapters in kernelgym_gap/dsl/).
- guards.py (`install_guards`, `leftover_processes`): an audit hook and thread-start wrappers that refuse,
  while submission code runs outside a DSL region, to start processes or threads, send signals, open sockets,
  or create, change or remove files; each refusal is recorded and fails the evaluation as an integrity
  violation even when the submission catches the exception.
- recorders.py (`watching()`, `describe_ops`): torch modes recording the aten ops the submission runs itself
  and tensor data it takes to the host: `library_compute`.
- snapshots.py (`Integrity`): what timing and checking rely on, snapshotted before the submission loads and
  compared after each call.

`WATCH` here is the same object as watch.WATCH (hostile fixtures reach it as
`sys.modules["kernelgym_gap.child.integrity"].WATCH`).
"""
from __future__ import annotations

from kernelgym_gap.child.guards import install_guards, leftover_processes
from kernelgym_gap.child.recorders import ALLOWED_OPS, HOST_EXTRACTION, Watching, describe_ops, watching
from kernelgym_gap.child.snapshots import Integrity
from kernelgym_gap.dsl.watch import WATCH, SandboxDenied, dsl_region, submission_code, user_callback

__all__ = ["ALLOWED_OPS", "HOST_EXTRACTION", "WATCH", "Integrity", "SandboxDenied", "Watching", "describe_ops",
           "dsl_region", "install_guards", "leftover_processes", "submission_code", "user_callback", "watching"]
