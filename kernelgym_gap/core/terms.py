"""The terms of a record, typed and versioned (issue 33): what `EvalRecord.terms` and a trainer's logged
terms hold, as frozen dataclasses.

On the wire and in the store the terms stay the JSON object they always were (no schema change of the
record, no store migration): `to_dict()` gives exactly the keys and values the producers wrote before
these classes existed, plus `terms_version`, and `from_dict()` reads that object back, refusing unknown
keys and wrong types with a ProtocolError (as core/record.py does for a record). A record stored before
`terms_version` existed parses with `terms_version=None` and writes back without it, so old rows
round-trip unchanged.

The record's terms are one flat object whose keys come in groups, each written by one producer: the base
keys every record has (engine/evaluation.py), the child's launch counts (the score stage, engine/stages.py),
the performance terms of a timed kernel (judge/measure.py) and the bound of a kernel killed for being too
slow (engine/too_slow.py). A group is one nested dataclass here (`Terms.counts`, `.score`, `.too_slow`),
flattened into the object on the wire: present with all its keys or absent with none, which is how the
producers write them. A shape's torch.compile terms (`ShapeTerms.compile`) are such a group too.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, ClassVar

from kernelgym_gap.core.errors import ProtocolError

# 1: the keys as they were when the terms were first typed (2026-12-05). A change of a key's meaning or
# type bumps it; a reader refuses terms newer than it knows.
# 2 (2026-12-06, issue 35): `kernelbench_allclose` is KernelBench's check on the trials of the task's timed
# distribution only (KernelBench's own inputs), compared on the raw output (no output_view); in 1 it ran on
# every correctness trial, stress distributions included, and through the view where a task has one.
TERMS_VERSION = 2


def _convert(tp: Any, value: Any, where: str) -> Any:
    """`value` checked against the annotation `tp`. Numbers keep their JSON type (an int stays an int where
    a float is declared), so that to_dict gives back the very values it was given."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(a, value, where)
            except ProtocolError:
                pass
        raise ProtocolError(f"{where}: {value!r} matches none of {args}")
    if isinstance(tp, type) and issubclass(tp, _Terms):
        return tp.from_dict(value, where)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ProtocolError(f"{where}: expected a list, got {type(value).__name__}")
        return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ProtocolError(f"{where}: expected an object with string keys")
        return {k: _convert(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProtocolError(f"{where}: expected a number, got {value!r}")
        return value
    if tp in (int, str, bool):
        if type(value) is not tp:
            raise ProtocolError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    raise ProtocolError(f"{where}: unsupported type {tp}")      # a bug in a declaration below


def _dump(value: Any) -> Any:
    if isinstance(value, _Terms):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


class _Terms:
    """to_dict / from_dict for the classes below. `_FLAT`: fields holding a group whose keys sit in this
    object on the wire (None: the group is absent). `_OMIT_NONE`: fields whose key is absent when None
    (never a value a producer writes as null)."""
    _FLAT: ClassVar[frozenset[str]] = frozenset()
    _OMIT_NONE: ClassVar[frozenset[str]] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in self._FLAT:
                if value is not None:
                    out.update(value.to_dict())
            elif value is not None or f.name not in self._OMIT_NONE:
                out[f.name] = _dump(value)
        return out

    @classmethod
    def keys(cls) -> frozenset[str]:
        """Every key this class's object can hold on the wire, its groups' included."""
        hints = typing.get_type_hints(cls)
        out: set[str] = set()
        for f in dataclasses.fields(cls):
            out |= _group(hints[f.name]).keys() if f.name in cls._FLAT else {f.name}
        return frozenset(out)

    @classmethod
    def from_dict(cls, data: Any, where: str = ""):
        where = where or cls.__name__
        if not isinstance(data, dict):
            raise ProtocolError(f"{where}: expected an object for {cls.__name__}, got {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        rest = dict(data)
        kwargs: dict[str, Any] = {}
        for name in sorted(cls._FLAT):
            group = _group(hints[name])
            part = {k: rest.pop(k) for k in group.keys() if k in rest}
            kwargs[name] = group.from_dict(part, where) if part else None
        fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in cls._FLAT}
        unknown = set(rest) - set(fields)
        if unknown:
            raise ProtocolError(f"{where}: unknown keys {sorted(map(str, unknown))} for {cls.__name__}")
        for name, f in fields.items():
            if name in rest:
                kwargs[name] = _convert(hints[name], rest[name], f"{where}.{name}")
            elif name in cls._OMIT_NONE:
                kwargs[name] = None
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ProtocolError(f"{where}: missing key {name!r} for {cls.__name__}")
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as e:        # a value the class's own checks refuse
            raise ProtocolError(f"{where}: {type(e).__name__}: {str(e)[:200]}") from None


def _group(tp: Any) -> type[_Terms]:
    """The group class of a flattened field's annotation (`Group | None`)."""
    return next(a for a in typing.get_args(tp) if isinstance(a, type) and issubclass(a, _Terms))


# ---- one timed shape (judge/measure.py) -----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ShapeCompile(_Terms):
    """A shape's torch.compile baseline (judge/measure._compile_terms): written for every shape, or none,
    when the baseline ran; E_alt only where the task names alternative libraries."""
    _OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"E_alt"})
    compile_ms: float | None
    E_compile: float | None
    E_alt: dict[str, float | None] | None = None


@dataclasses.dataclass(frozen=True)
class ShapeTerms(_Terms):
    """One timed shape's terms (judge/measure._shape_row): times, floor, E, U, launch counts."""
    _FLAT: ClassVar[frozenset[str]] = frozenset({"compile"})
    shape: tuple[int, ...]
    dtype: str
    split: str
    kernel_ms: float
    kernel_spread: float
    kernel_reps: int
    library_ms: float
    library_spread: float
    floor_ms: float
    bound: str                      # which ceiling sets the floor: "memory" or "compute"
    E: float
    U: float
    library_U: float
    launches_per_call: int
    programs: int
    stream_ms: float | None
    device_ms: float | None
    handed_bytes: int | None
    min_bytes: float                # the task's min_bytes: an int, kept as given
    library_source: str
    library_check_ms: float | None
    library_hint_ms: float | None
    early_exit: bool
    compile: ShapeCompile | None = None


# ---- the groups of the record's terms -------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ChildCounts(_Terms):
    """The most launches and programs one call of the submission made (the score stage)."""
    launches_per_call: int
    programs: int


@dataclasses.dataclass(frozen=True)
class CalibrationTerms(_Terms):
    """The device ceilings the floors were computed with (judge/calibrate.Calibration)."""
    source: str                     # "measured" or "datasheet"
    copy_bytes_per_s: float
    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    matmul_flops_per_s: dict[str, float]
    device: str


@dataclasses.dataclass(frozen=True)
class ScoreTerms(_Terms):
    """A timed correct kernel's aggregate terms beyond E, U and performance (judge/measure.performance_terms)."""
    f_E: float
    g_U: float
    E_compile: float | None
    reward_baseline: str            # the library the reward's E was taken against
    E_reward: float
    library_U: float
    calibration: CalibrationTerms


@dataclasses.dataclass(frozen=True)
class TooSlowTerms(_Terms):
    """The bound on a kernel killed past a call's deadline after its smallest shapes checked correct
    (engine/too_slow.py): None where a figure is unknown (and always on cpu)."""
    E_upper: float | None
    U_upper: float | None
    library_ms: float | None
    floor_ms: float | None
    too_slow_by_rule: bool | None
    trials_finished: int
    killed_call: str
    bound_s: float
    reached_s: float
    first_call: bool


@dataclasses.dataclass(frozen=True)
class Terms(_Terms):
    """`EvalRecord.terms`: the base keys every record carries (engine/evaluation.py), and the groups the
    stage that decided wrote. None for performance, E, U and per_shape where nothing was measured (every
    cpu record: no CPU time is ever a GPU figure).

    `kernelbench_allclose`: KernelBench's own check (torch.allclose(atol=rtol=1e-2) of the raw output against
    the task's reference in the input dtype) over the correctness trials of the task's timed distribution, the
    inputs KernelBench's check runs on; the stress distributions are the verdict's alone. None where no such
    trial was checked (a failed check; on cpu a workload whose trials never meet the timed distribution) and
    on records whose stage did not reach the check. Terms of version 1 ran it on every trial."""
    _FLAT: ClassVar[frozenset[str]] = frozenset({"counts", "score", "too_slow"})
    _OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"terms_version"})
    correctness: float
    performance: float | None
    E: float | None
    U: float | None
    per_shape: tuple[ShapeTerms, ...] | None
    kernelbench_allclose: bool | None
    flags: tuple[str, ...]
    counts: ChildCounts | None = None
    score: ScoreTerms | None = None
    too_slow: TooSlowTerms | None = None
    terms_version: int | None = TERMS_VERSION      # None: terms stored before they carried a version

    def __post_init__(self):
        v = self.terms_version
        if v is not None and not 1 <= v <= TERMS_VERSION:
            raise ValueError(f"terms_version {v}: this reader knows versions 1 to {TERMS_VERSION}")


# ---- what a trainer logs (integrations/terms.py, integrations/reward_items.py) ----------------------

@dataclasses.dataclass(frozen=True)
class TrainerTerms(_Terms):
    """One sample's terms as a trainer logs them: a record flattened (integrations/terms.record_terms) or
    an item that was not evaluated (status invalid_item or harness_error, and the reason). The same keys
    every time (verl stacks them), so it carries no terms_version: that would change the reward server's
    wire format, which trainers' configurations name key by key."""
    score: float
    reward: float
    acc: float
    correct: float
    correctness: float | None
    performance: float | None
    E: float | None
    U: float | None
    status: str
    reward_mode: str
    reason: str


# ---- lenient reads, for terms that may not parse ----------------------------------------------------

def _number(value: Any) -> float | int | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclasses.dataclass(frozen=True)
class Headline:
    """The numbers a summary shows (a store row, a CLI line, a trainer's log), read from terms that may not
    parse as `Terms`: a record stored by an older harness that lacked a key since added, or a caller's
    synthetic record. Each is the JSON number the terms hold under that key, or None where the key is absent
    or holds something else (a number is never made up). Readers of a record this harness just made can use
    `EvalRecord.typed_terms` instead; these keys are spelled here so that no reader spells them."""
    correctness: float | None
    performance: float | None
    E: float | None
    U: float | None
    E_compile: float | None

    @classmethod
    def of(cls, terms: Any) -> "Headline":
        t = terms if isinstance(terms, dict) else {}
        return cls(**{f.name: _number(t.get(f.name)) for f in dataclasses.fields(cls)})


def shape_rows(terms: Any) -> list[dict]:
    """The per-shape rows as stored (the JSON objects of ShapeTerms), leniently: [] where there are none,
    rows that are not objects left out."""
    rows = (terms if isinstance(terms, dict) else {}).get("per_shape") or []
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def calibration_of(terms: Any) -> dict | None:
    """The device calibration a cuda record's terms carry (CalibrationTerms as stored), leniently: None where
    there is none or it is not an object."""
    cal = (terms if isinstance(terms, dict) else {}).get("calibration")
    return cal if isinstance(cal, dict) else None


def map_shape_rows(terms: Any, rewrite) -> Any:
    """`terms` with each per-shape row object replaced by `rewrite(row)` (a new dict; `terms` is not changed);
    terms that are not an object, or hold no list of rows, come back as they are. Rows that are not objects are
    kept as they are: a lenient rewrite for records that may not parse (engine/feedback.public_view)."""
    if not isinstance(terms, dict) or not isinstance(terms.get("per_shape"), list):
        return terms
    return {**terms, "per_shape": [rewrite(r) if isinstance(r, dict) else r for r in terms["per_shape"]]}
