"""The sandboxed side of `import kernelbench` (importers/sandboxed.py starts it): counts one problem file's
facts with kernelbench.build_meta and writes them as one JSON report,
{"ok": true, "meta": {...}} or {"ok": false, "refused": "why"}.

    python -m kernelgym_gap.importers.analyse_child PROBLEM.py NAME REPORT.json

The problem's code runs here, inside the sandbox, and could write the report itself: the parent treats the
report as hostile data (bounded, plain data only, path-forming fields checked)."""
from __future__ import annotations

import json
import sys
from pathlib import Path


def _report(path: str, name: str) -> dict:
    from kernelgym_gap.importers.kernelbench import ImportRefused, build_meta
    try:
        return {"ok": True, "meta": build_meta(Path(path), name)}
    except ImportRefused as e:
        return {"ok": False, "refused": str(e)}
    except Exception as e:  # noqa: BLE001 - the importer's own failure on this file: its kind, not its text
        return {"ok": False, "refused": f"the analysis failed: {type(e).__name__}"}


def main(argv: list[str]) -> int:
    path, name, out = argv
    report = _report(path, name)
    try:
        text = json.dumps(report, allow_nan=False)
    except (TypeError, ValueError) as e:
        text = json.dumps({"ok": False, "refused": f"the problem's facts are not plain data ({type(e).__name__})"})
    Path(out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
