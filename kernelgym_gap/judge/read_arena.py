"""Host memory the warm checker reads the child's output files into, kept from one evaluation to the next
(Placement.read_arena_bytes; issue 35's step).

Why: the check's prefetch (judge/prefetch.py) read each output file into a fresh tensor. Fresh memory is faulted
in page by page (read_tensor memsets it first), and on the H200 host the prefetch took 1.7-2.2 s of each warm
env.step for about 2.1 GiB of Softmax or LayerNorm outputs (2026-12-07, results/h200_2026-12-07_session53/
staging_steps_*). Reading a file that is in the page cache into memory already faulted in is a plain copy:
5-9x faster on the 2-core CI host (scripts/read_arena_bench.py prints the ratio on the host it runs on).

How: one block, faulted in once, handed out front to back (`take`, 64-byte aligned so that any dtype's view of a
slice is valid) and taken back whole by `reset` when the server starts the next evaluation's reads. A request the
block cannot hold gets a fresh tensor, as without the arena, and the next `reset` grows the block to what the
evaluation wanted in all, up to `max_bytes`. The block is never shrunk: the memory a checker holds is at most
`max_bytes` beside what the prefetch's own bound (PREFETCH_BYTES) lets one evaluation read fresh.

What it must never do: hand out memory that something still reads. Every slice handed out since the last reset
is disjoint from every other, and judge/checker.serve resets only where nothing read before is used again: at
an early read (`early PATH`, which drops any earlier one) and at a check spec that has no early read of its own.
The tensors' bytes are the files' bytes either way: the verdicts cannot differ (tests/test_read_arena.py checks
a warm checker's records against the cold path's over evaluations in a row).
"""
from __future__ import annotations

import torch

from kernelgym_gap.core.placement import check_read_arena_bytes

ALIGN = 64                       # every slice starts on this boundary: a view as any dtype is valid


def _faulted(nbytes: int) -> torch.Tensor:
    block = torch.empty(nbytes, dtype=torch.uint8)
    block.zero_()                # its pages made resident now, not one by one inside the reads
    return block


class ReadArena:
    """One warm checker's read memory (see the module docstring). Not thread-safe: the server's loop is its only
    user."""

    def __init__(self, max_bytes: int):
        if check_read_arena_bytes(max_bytes) == 0:      # Placement's bound; 0 there means no arena at all
            raise ValueError("an arena holds at least 1 byte, not 0")
        self.max_bytes = max_bytes
        self._block: torch.Tensor | None = None
        self._used = 0            # bytes of the block handed out since the last reset (aligned)
        self._wanted = 0          # bytes this evaluation asked for in all, the block's or not (aligned)
        self.resets = 0
        self.fresh = 0            # requests the block could not hold since the last reset
        self.fresh_total = 0

    @property
    def size(self) -> int:
        return 0 if self._block is None else self._block.numel()

    def reset(self) -> None:
        """A new evaluation's reads begin: everything handed out before is taken back (the caller holds none of
        it), and the block grows to what the last evaluation wanted, up to max_bytes."""
        target = min(self.max_bytes, self._wanted)
        if target > self.size:
            self._block = None       # the old block let go before the larger one is made
            self._block = _faulted(target)
        self._used = self._wanted = 0
        self.fresh = 0
        self.resets += 1

    def take(self, nbytes: int) -> torch.Tensor:
        """`nbytes` of host memory whose pages are resident (tensor_file.read_tensor's `into`): a slice of the
        block, or a fresh tensor when the block cannot hold it. Never zeroed for the caller."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"a read takes a non-negative number of bytes, not {nbytes!r}")
        span = -(-nbytes // ALIGN) * ALIGN
        self._wanted += span
        if self._block is not None and self._used + nbytes <= self._block.numel():
            at = self._used
            self._used += span
            return self._block[at:at + nbytes]
        self.fresh += 1
        self.fresh_total += 1
        return _faulted(nbytes)

    def state(self) -> dict[str, int]:
        """What the server's reply says of it (api/warm.WarmChecker.last_arena): the block's size, the
        evaluations begun, the requests it could not hold since the last reset and in all."""
        return {"size": self.size, "resets": self.resets, "fresh": self.fresh, "fresh_total": self.fresh_total}

    def __repr__(self) -> str:
        return f"ReadArena(size={self.size}, used={self._used}, max={self.max_bytes}, resets={self.resets})"
