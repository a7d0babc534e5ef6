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
    UNSTABLE_TIMING = "unstable_timing"
    # compiled but not run: correctness could not be verified on this backend
    UNVERIFIED = "unverified"

    @property
    def is_failure(self) -> bool:
        return self is not Status.OK

    def __str__(self) -> str:
        return self.value


# Where each kind is decided, for documentation and the CLI's `statuses` listing.
STAGE = {
    Status.OK: "-",
    Status.SOURCE_TOO_LARGE: "gate", Status.SOURCE_NOT_UTF8: "gate", Status.SYNTAX_ERROR: "gate",
    Status.ENTRY_POINT_MISSING: "gate", Status.WRONG_DSL: "gate",
    Status.COMPILE_ERROR: "child", Status.RUNTIME_ERROR: "child", Status.CRASH: "sandbox",
    Status.TIMEOUT: "sandbox", Status.OUTPUT_TOO_LARGE: "sandbox", Status.PROTOCOL_ERROR: "parent",
    Status.NO_KERNEL_LAUNCHED: "child", Status.INTEGRITY_VIOLATION: "child", Status.LIBRARY_COMPUTE: "child",
    Status.OUT_OF_MEMORY: "sandbox",
    Status.WRONG_TYPE: "checker", Status.WRONG_DTYPE: "checker", Status.WRONG_SHAPE: "checker",
    Status.OUTPUT_ALIASES_INPUT: "child", Status.NON_FINITE: "checker", Status.ALL_ZERO: "checker",
    Status.MISMATCH: "checker", Status.INPUT_MUTATED: "checker",
    Status.FASTER_THAN_FLOOR: "roofline", Status.UNSTABLE_TIMING: "timing",
    Status.UNVERIFIED: "child",
}
