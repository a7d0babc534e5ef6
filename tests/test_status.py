"""Statuses and their properties live on `Status` (core/status.py); lists of statuses elsewhere are derived
from them, so a status that is added or removed cannot be left out of one, nor a removed one linger."""
from __future__ import annotations

import sqlite3

import pytest

from kernelgym_gap.core.status import Status
from kernelgym_gap.store import db as st
from kernelgym_gap.store.results import NOT_CACHED_STATUSES, RETIRED_STATUSES

from test_store import make_record


def test_only_deadline_kills_crashes_and_broken_reports_depend_on_the_machine():
    machine = {s for s in Status if s.depends_on_the_machine}
    assert machine == {Status.TIMEOUT, Status.TOO_SLOW, Status.CRASH, Status.PROTOCOL_ERROR}
    assert all(s.cacheable is not s.depends_on_the_machine for s in Status)
    # a wrong answer is the source's own: measuring it again gives the same verdict
    assert Status.MISMATCH.cacheable and Status.OK.cacheable and Status.COMPILE_ERROR.cacheable


def test_the_store_never_serves_what_status_calls_uncacheable():
    assert NOT_CACHED_STATUSES == {s.value for s in Status if not s.cacheable} | RETIRED_STATUSES


def test_a_retired_status_is_no_status_any_more():
    for name in RETIRED_STATUSES:
        with pytest.raises(ValueError):
            Status(name)


@pytest.mark.parametrize("status", [s for s in Status if not s.cacheable])
def test_a_machine_dependent_result_is_stored_but_not_served(tmp_path, status):
    s = st.Store(tmp_path / "r.sqlite3")
    key = st.CacheKey(st.source_sha256("src"), "kernelgym_gap/GELU-v0", 0, "triton", "cuda", "NVIDIA H200",
                      "settings", "sw")
    sid = s.add_record(make_record(status=status), "src", "a", key=key)
    assert s.submission(sid)["record"]["status"] == status.value
    assert s.lookup(key) is None


def test_a_row_left_with_a_retired_status_is_not_served(tmp_path):
    """A database written before unstable_timing was removed may still hold such a row; looking its key up
    finds nothing (it would not parse back into a record) rather than failing."""
    path = tmp_path / "r.sqlite3"
    s = st.Store(path)
    key = st.CacheKey(st.source_sha256("src"), "kernelgym_gap/GELU-v0", 0, "triton", "cuda", "NVIDIA H200",
                      "settings", "sw")
    s.add_record(make_record(), "src", "a", key=key)
    assert s.lookup(key) is not None
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE evaluations SET status = 'unstable_timing'")
    assert st.Store(path).lookup(key) is None
