"""The generic (kind, key) -> JSON cache table: library baselines and device calibrations per device and
software. A mixin of `Store` (store/db.py), plus the write every stored cuda record makes into it."""
from __future__ import annotations

import json

from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.terms import calibration_of, shape_rows
from kernelgym_gap.store.cache_key import CacheKey
from kernelgym_gap.store.cache_key import canonical as canonical_json
from kernelgym_gap.store.schema import dumps, now_iso


def cache_row_key(key) -> str:
    return key if isinstance(key, str) else canonical_json(key)


class DeviceCacheMixin:
    def cache_get(self, kind: str, key: str) -> dict | None:
        row = self.conn.execute("SELECT value_json FROM cache WHERE kind=? AND key=?",
                                (kind, cache_row_key(key))).fetchone()
        return json.loads(row["value_json"]) if row else None

    def cache_put(self, kind: str, key: str, value: dict) -> None:
        if not isinstance(value, dict):
            raise TypeError("cache values are JSON objects (dict)")
        text = json.dumps(value, allow_nan=False)
        self._write(lambda conn: conn.execute("INSERT OR REPLACE INTO cache VALUES (?, ?, ?, ?)",
                                              (kind, cache_row_key(key), text, now_iso())))

    def cache_items(self, kind: str, limit: int = 1000) -> list[dict]:
        """The values of one kind, newest first, each with its key and when it was written."""
        rows = self.conn.execute("SELECT key, value_json, created_at FROM cache WHERE kind=? "
                                 "ORDER BY created_at DESC, key LIMIT ?", (kind, limit))
        return [{"key": r["key"], "value": json.loads(r["value_json"]), "updated_at": r["created_at"]} for r in rows]

    def cache_delete(self, kind: str, key: str | None = None) -> int:
        if key is None:
            return self._write(lambda conn: conn.execute("DELETE FROM cache WHERE kind=?", (kind,)).rowcount)
        return self._write(lambda conn: conn.execute("DELETE FROM cache WHERE kind=? AND key=?",
                                                     (kind, cache_row_key(key))).rowcount)


def put_device_cache(conn, record: EvalRecord, key: CacheKey) -> None:
    """The device ceilings and library timings a cuda record carries, kept per device and software."""
    terms, now = record.terms or {}, now_iso()
    cal = calibration_of(terms)
    if cal is not None:
        conn.execute("INSERT OR REPLACE INTO cache VALUES ('calibration', ?, ?, ?)",
                     (cache_row_key([key.device, key.software_hash]), dumps(cal), now))
    for row in shape_rows(terms):
        if not isinstance(row.get("library_ms"), (int, float)):
            continue
        k = cache_row_key([key.task_id, key.task_version, row.get("shape"), row.get("dtype"), key.device,
                           key.software_hash])
        value = {"task": key.task_id, "task_version": key.task_version, "shape": row.get("shape"),
                 "dtype": row.get("dtype"), "device": key.device, "library_ms": row["library_ms"],
                 "library_spread": row.get("library_spread"), "floor_ms": row.get("floor_ms"),
                 "measured_at": record.created_at or now}
        conn.execute("INSERT OR REPLACE INTO cache VALUES ('library_baseline', ?, ?, ?)",
                     (k, dumps(value), now))
