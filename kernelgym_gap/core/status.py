"""The outcome of one evaluation: `ok` or exactly one typed failure kind."""
from __future__ import annotations

import enum


class Status(str, enum.Enum):
    OK = "ok"
    # static gate (parent, before any process starts)
    SOURCE_TOO_LARGE = "source_too_large"
    SOURCE_NOT_UTF8 = "source_not_utf8"
    SYNTAX_ERROR = "syntax_error"
    ENTRY_POINT_MISSING = "entry_point_missing"
    WRONG_DSL = "wrong_dsl"
    # the child process
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    CRASH = "crash"
    TIMEOUT = "timeout"
    # correct on every trial it finished (the smallest shapes first: engine/correctness_order.py), then killed
    # past a call's stage deadline on a larger one: correct where checked, too slow to time in full
    TOO_SLOW = "too_slow"
    OUTPUT_TOO_LARGE = "output_too_large"
    PROTOCOL_ERROR = "protocol_error"
    NO_KERNEL_LAUNCHED = "no_kernel_launched"
    LIBRARY_COMPUTE = "library_compute"       # torch (or numpy) did work the DSL kernel should have done
    INTEGRITY_VIOLATION = "integrity_violation"
    OUT_OF_MEMORY = "out_of_memory"           # the memory limit (cgroup or RLIMIT_AS) was hit
    # correctness (trusted checker)
    WRONG_TYPE = "wrong_type"
    WRONG_DTYPE = "wrong_dtype"
    WRONG_SHAPE = "wrong_shape"
    OUTPUT_ALIASES_INPUT = "output_aliases_input"
    NON_FINITE = "non_finite"
    ALL_ZERO = "all_zero"
    MISMATCH = "mismatch"
    INPUT_MUTATED = "input_mutated"
    # measurement
    FASTER_THAN_FLOOR = "faster_than_floor"
    # compiled but not run: correctness could not be verified on this backend
    UNVERIFIED = "unverified"

    @property
    def is_failure(self) -> bool:
        """Every status but ok and too_slow: a too_slow kernel was correct where checked and earns its own
        reward (judge/reward.too_slow_reward), which trainers must get, not their failure reward."""
        return self not in (Status.OK, Status.TOO_SLOW)

    @property
    def depends_on_the_machine(self) -> bool:
        """Whether this outcome can come from the machine's state at that moment rather than from the source
        alone: a kill at a deadline (timeout; too_slow, issue 38) depends on the load then, a crash or a
        broken report on the process's luck. Such a record is never served from a result cache: the next
        evaluation of the same source may end otherwise."""
        return self in (Status.TIMEOUT, Status.TOO_SLOW, Status.CRASH, Status.PROTOCOL_ERROR)

    @property
    def cacheable(self) -> bool:
        return not self.depends_on_the_machine

    def __str__(self) -> str:
        return self.value

# Which stage decides each kind: kernelgym_gap.engine.stages.STAGE_OF (read off the stages themselves).
