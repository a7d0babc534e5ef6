"""The importer's analysis of one problem file, run in a sandboxed child (issue 32, I1).

A problem file is code: its module body, `get_inputs()`, `get_init_inputs()` and `Model` run many times while
the importer counts shapes, flops and tolerances. Run in the importing process they ran as the invoking user
(root in CI and on GPU hosts) with the network, the host's files and `$KERNELGYM_GAP_TOKEN` in reach. Here
they run where a submission runs: `sandbox.process.run_sandboxed`, the same layers (namespaces, a fresh
unprivileged uid when root, rlimits, cgroups, a clean environment, a scratch directory of its own), on a copy
of the file's bytes the parent read itself (never the user's path: no link is followed, nothing else of the
user's directory is visible). The child (importers/analyse_child.py) writes one JSON report; the parent reads
it as hostile (bounded size and depth, core/bounded_json.py) and accepts only plain data of the expected
shape (check_meta): the problem's code can forge the report, so nothing in it is trusted beyond being data.
"""
from __future__ import annotations

import math
import re
import shutil
import sys
import tempfile
from pathlib import Path

from kernelgym_gap.core import bounded_json
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.task import CATEGORIES, DSLS, IMPORTED_CATEGORIES
from kernelgym_gap.importers.analysis import ImportRefused
from kernelgym_gap.sandbox.child_io import backend_env, read_child_file
from kernelgym_gap.sandbox.process import child_env, run_sandboxed

MAX_REPORT_BYTES = 4 << 20      # a META is a few kB: shapes, signatures, a statement
# a refusal's text, as the child wrote it (cut, one line): one refusal is under 400 characters; one retried on
# conditioned parameters (importers/state_init.py) carries both reasons
MAX_MESSAGE = 1000
SAFE_NAME = re.compile(r"[A-Za-z0-9_]{1,100}")
_REPORT = "report.json"


def analyse(source: bytes, name: str, config: EvalConfig | None = None) -> dict:
    """META for the problem whose file holds `source`, counted in a sandboxed child; ImportRefused with the
    reason otherwise (the problem's own refusal, or the child's failure by kind: never its output, which
    could quote the file)."""
    if not SAFE_NAME.fullmatch(name):
        raise ImportRefused("the task name is not made of [A-Za-z0-9_] (at most 100)")
    config = config or EvalConfig()
    scratch = Path(tempfile.mkdtemp(prefix="kgg-import-"))   # system temp (scratch_root is placement now)
    try:
        # named after the task: the statement and the child's tracebacks name this file, never the user's path
        (scratch / f"{name}.py").write_bytes(source)
        argv = [sys.executable, "-m", "kernelgym_gap.importers.analyse_child", f"{name}.py", name, _REPORT]
        outcome = run_sandboxed(argv, scratch, child_env(scratch, backend_env("cpu")), config.sandbox)
        try:
            raw = read_child_file(scratch / _REPORT, MAX_REPORT_BYTES, "the import's report")
        except ProtocolError as e:
            raise ImportRefused(f"the sandboxed analysis wrote no usable report ({e})") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if raw is None:
        how = (f"took over its time limit of {config.sandbox.wall_s:g} s (--timeout)" if outcome.timed_out else f"was killed by {outcome.signal}" if outcome.signal
               else f"exited with code {outcome.returncode}")
        limits = f" (limits hit: {', '.join(outcome.limits_hit)})" if outcome.limits_hit else ""
        raise ImportRefused(f"the sandboxed analysis {how} without a report{limits}")
    try:
        report = bounded_json.loads(raw, max_bytes=MAX_REPORT_BYTES, what="the import's report")
    except bounded_json.BoundedJSONError as e:
        raise ImportRefused(str(e)) from None
    if not isinstance(report, dict) or not isinstance(report.get("ok"), bool):
        raise ImportRefused("the import's report is not {ok: bool, ...}")
    if not report["ok"]:
        message = report.get("refused")
        if not isinstance(message, str):
            raise ImportRefused("the import's report refuses without a reason")
        raise ImportRefused(_one_line(message))
    meta = report.get("meta")
    check_meta(meta, name)
    return meta


def _one_line(text: str) -> str:
    text = "".join(c if c.isprintable() else " " for c in text.replace("\n", " "))
    return text[:MAX_MESSAGE] + ("..." if len(text) > MAX_MESSAGE else "")


def check_plain(value, at: str = "META", depth: int = 0) -> None:
    """`value` is plain data (dict with str keys, list, str, int, float, bool, None) whose repr is a Python
    literal; ImportRefused naming where it is not."""
    if depth > 16:
        raise ImportRefused(f"{at} nests too deeply")
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ImportRefused(f"{at} is not a finite number")
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            check_plain(v, f"{at}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ImportRefused(f"{at} has a key that is not a string")
            check_plain(v, f"{at}[{k!r}]", depth + 1)
        return
    raise ImportRefused(f"{at} is a {type(value).__name__}, not plain data")


def check_meta(meta, name: str) -> None:
    """The report's META is plain data and its path-forming and code-forming fields are what this importer
    writes: the task's folder is OUT/<category>/<name>, so both are checked here, not trusted."""
    from kernelgym_gap.importers.runtime import FORMAT
    if not isinstance(meta, dict):
        raise ImportRefused("the import's report holds no META")
    check_plain(meta)
    expected = {"format": FORMAT, "name": name, "problem_file": "problem.py"}
    for key, want in expected.items():
        if meta.get(key) != want:
            raise ImportRefused(f"the import's report has {key} other than {want!r}")
    if meta.get("category") not in CATEGORIES + IMPORTED_CATEGORIES:
        raise ImportRefused(f"the import's report has a category outside {CATEGORIES + IMPORTED_CATEGORIES}")
    if not isinstance(meta.get("dsls"), list) or not set(meta["dsls"]) <= set(DSLS):
        raise ImportRefused(f"the import's report has dsls other than a list of {DSLS}")
    for key in ("size_names", "state_names", "distributions"):
        if not isinstance(meta.get(key), list) or not all(isinstance(v, str) for v in meta[key]):
            raise ImportRefused(f"the import's report has {key} that is not a list of names")
    for key in ("shapes", "workloads", "tolerances"):
        if not isinstance(meta.get(key), dict):
            raise ImportRefused(f"the import's report has {key} that is not a mapping")
    for key in ("statement", "signature", "entry_point"):
        if not isinstance(meta.get(key), str):
            raise ImportRefused(f"the import's report has {key} that is not text")
