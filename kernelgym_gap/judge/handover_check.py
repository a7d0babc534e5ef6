"""The checker's side of the hand-over's exchange (issue 35; the contract in docs/measurement.md, "The outputs
handed over on the device"): between the plan (judge/ipc_records.plan_outputs) and the check itself.

`handed_over` allocates the arena for the plan's copies, answers the parent one handover line
`{"spec": PATH, "handover": {"arena": {handle, offset, nbytes} | null, "planned": rows}}` (rows:
ipc_records.plan_to_wire), reads the parent's go line and yields what the check judges in place of each
handed-over output file: the arena's view (a tensor, judged as an output read before the lane) or the
output's verdict (a Refused, applied at its trial's turn). It yields None when the parent aborted (it falls
back to files and asks again) or went away. The arena is freed when the block ends, whatever happened; one
that cannot be allocated or exported (ArenaError) is announced as null, and the parent falls back to files.

The go line is `{"copies": {FILE_NAME: RESULT}}` with one opener result per planned output (judge/opener.py's
results) or `{"abort": true}`. It comes from the trusted parent: a malformed one is our bug (ValueError, the
check fails as the trusted checker's failure), never a verdict on the child. A planned output that was not
copied is protocol_error: the child reported an output it did not hand over."""
from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator

import torch

from kernelgym_gap.core.status import Status
from kernelgym_gap.judge.arena import ArenaError, ArenaLike
from kernelgym_gap.judge.ipc_records import (NeedsFile, OutputKey, OutputKind, Plan, Planned, Refused, plan_to_wire,
                                             views_from_arena)
from kernelgym_gap.judge.output_rules import recheck_what, trial_what

COPIED = "copied"
# judge/opener.RESULTS (opener.py is stdlib-only and loaded by path; a test holds the two equal)
COPY_RESULTS = ("copied", "open_failed", "extent_refused", "copy_failed", "not_attempted")
MAX_GO_LINE = 1 << 20        # as the opener's request bound

Handed = torch.Tensor | Refused        # what the check judges for one handed-over output
ArenaFactory = Callable[[int, str], ArenaLike | None]


def not_handed_message(entry: Planned, result: str) -> str:
    what = trial_what(entry.trial) if entry.key.kind is OutputKind.TRIAL else recheck_what(entry.trial)
    return f"{what}: the child reported an output it did not hand over ({result})"


def parse_go(line: str, plan: Plan) -> dict[OutputKey, str] | None:
    """The copies' results by output, or None for an abort; ValueError for anything the parent does not send."""
    if len(line) > MAX_GO_LINE:
        raise ValueError(f"the go line is {len(line)} characters, past {MAX_GO_LINE}")
    go = json.loads(line)
    if go == {"abort": True}:
        return None
    if not isinstance(go, dict) or set(go) != {"copies"} or not isinstance(go["copies"], dict):
        raise ValueError(f"the go line must be {{\"copies\": {{...}}}} or {{\"abort\": true}}, got {line[:200]!r}")
    if any(isinstance(e, NeedsFile) for e in plan.entries):
        raise ValueError("the plan has outputs that need a file: the parent must abort and check by files")
    planned = {e.key.file_name: e.key for e in plan.planned}
    copies = go["copies"]
    if set(copies) != set(planned):
        raise ValueError(f"the go line's copies {sorted(copies)} are not the planned outputs {sorted(planned)}")
    bad = {name: r for name, r in copies.items() if r not in COPY_RESULTS}
    if bad:
        raise ValueError(f"the go line's results {bad} are not among {COPY_RESULTS}")
    return {planned[name]: result for name, result in copies.items()}


@contextlib.contextmanager
def handed_over(spec_path: str, plan: Plan, device: str, send: Callable[[dict], None], receive: Callable[[], str],
                arena_factory: ArenaFactory) -> Iterator[dict[OutputKey, Handed] | None]:
    """See the module docstring. `send(obj)` writes one protocol line; `receive()` reads the go line (""
    when the parent went away)."""
    arena = exported = None
    try:
        if plan.planned:
            try:
                arena = arena_factory(plan.arena_bytes, device)
                exported = arena.export() if arena is not None else None
            except ArenaError as e:
                # no arena (device memory, torch's export): the parent falls back to files, not a verdict
                sys.stderr.write(f"the hand-over's arena: {e}\n")
                if arena is not None:
                    arena.free()
                arena = None
        send({"spec": spec_path, "handover": {"arena": exported, "planned": plan_to_wire(plan)}})
        line = receive()
        results = parse_go(line, plan) if line.strip() else None
        if results is None:
            yield None
            return
        copied = [e for e in plan.planned if results[e.key] == COPIED]
        if copied and arena is None:
            raise ValueError("the go line says outputs were copied into an arena this checker never exported")
        views = views_from_arena(arena.tensor, plan) if copied else {}
        handed: dict[OutputKey, Handed] = {}
        for e in plan.entries:
            if isinstance(e, Refused):
                handed[e.key] = e
            elif results[e.key] == COPIED:
                handed[e.key] = views[e.key]
            else:
                handed[e.key] = Refused(key=e.key, trial=e.trial, status=Status.PROTOCOL_ERROR,
                                        message=not_handed_message(e, results[e.key]))
        del views
        yield handed
    finally:
        if arena is not None:
            arena.free()
