"""Recorders: what torch did for the submission while its code ran.

`watching()` gives one watched stretch of submission code: guards on (`submission_code()`), and two torch modes
pushed: `OpRecorder`, a TorchDispatchMode recording every aten op the submission itself runs outside a DSL
region, minus an allow-list of allocation, view, metadata and copy ops (on cuda, device-to-host copies too),
and `HostRecorder`, a TorchFunctionMode recording tensor data taken to the host (`numpy`, `tolist`,
`__array__`, `__dlpack__`). Either means the library, not the kernel, did (part of) the work:
`library_compute`. `describe_ops` words what they recorded."""
from __future__ import annotations

import collections
import contextlib
import sys

from kernelgym_gap.dsl.watch import WATCH, WatchState, submission_code

# aten ops a submission may run itself: allocation, views and metadata, copies and dtype conversion.
ALLOWED_OPS = frozenset("""
empty empty_like empty_strided new_empty new_empty_strided empty_permuted
zeros zeros_like new_zeros ones ones_like new_ones full full_like new_full scalar_tensor
fill fill_ zero zero_
view _unsafe_view view_as reshape _reshape_alias as_strided as_strided_ permute transpose transpose_ t t_
expand expand_as contiguous clone copy copy_ _copy_from _copy_from_and_resize _to_copy to detach detach_ alias
lift_fresh lift_fresh_copy select slice narrow unsqueeze unsqueeze_ squeeze squeeze_ flatten unflatten unbind
split split_with_sizes chunk movedim swapaxes unfold view_as_real view_as_complex conj resolve_conj
_local_scalar_dense sym_size sym_stride sym_numel sym_storage_offset size stride numel dim is_contiguous
is_same_size is_pinned pin_memory _pin_memory set_ resize_ record_stream _has_compatible_shallow_copy_type
""".split())

HOST_EXTRACTION = frozenset({"numpy", "tolist", "__array__", "__dlpack__", "__array_interface__"})

_WATCH_MODULE = "kernelgym_gap.dsl.watch"


def _op_name(func) -> str:
    try:
        return func._overloadpacket.__name__
    except AttributeError:
        return getattr(func, "__name__", str(func))


def _device_to_host(name: str, args, kwargs) -> bool:
    import torch
    if name == "_to_copy" and args and isinstance(args[0], torch.Tensor) and args[0].is_cuda:
        dev = kwargs.get("device")
        return dev is not None and torch.device(dev).type == "cpu"
    if name in ("copy_", "_copy_from") and len(args) > 1 and all(isinstance(a, torch.Tensor) for a in args[:2]):
        dst, src = (args[0], args[1]) if name == "copy_" else (args[1], args[0])
        return src.is_cuda and dst.device.type == "cpu"
    return False


def _make_modes():
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpRecorder(TorchDispatchMode):
        """Records the aten ops the submission runs itself (not inside a DSL launch) beyond the allow-list."""

        @classmethod
        def _should_skip_dynamo(cls):
            # torch would otherwise wrap __torch_dispatch__ in a dynamo-disable that imports torch._dynamo
            # (3 s, and it writes temporary files) on the first op
            return False

        def __init__(self):
            super().__init__()
            self.ops: collections.Counter = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if WATCH.recording:
                name = _op_name(func)
                if name not in ALLOWED_OPS:
                    self.ops[str(func)] += 1
                elif WATCH.backend == "cuda" and _device_to_host(name, args, kwargs):
                    self.ops[f"{func} (device to host)"] += 1
            return func(*args, **kwargs)

    class HostRecorder(TorchFunctionMode):
        """Records tensor data taken out of torch (to numpy, lists, DLPack) by the submission."""

        def __init__(self):
            super().__init__()
            self.ops: collections.Counter = collections.Counter()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if WATCH.recording:
                name = getattr(func, "__name__", "")
                if name in HOST_EXTRACTION:
                    self.ops[f"Tensor.{name} (tensor data taken out of torch)"] += 1
            return func(*args, **(kwargs or {}))

    return OpRecorder, HostRecorder


_MODES = None


def mode_classes() -> tuple:
    """The recorder classes once built (the snapshots cover them), else ()."""
    return tuple(_MODES) if _MODES is not None else ()


class Watching:
    """One watched stretch of submission code: guards on, both recorders pushed. `ops` after exit."""

    def __init__(self):
        global _MODES
        if _MODES is None:
            _MODES = _make_modes()
        self.dispatch, self.function = _MODES[0](), _MODES[1]()
        self.ops: collections.Counter = collections.Counter()

    def __enter__(self):
        import torch
        self._lens = torch._C._len_torch_dispatch_stack(), torch._C._len_torch_function_stack()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(self.function)
        self._stack.enter_context(self.dispatch)
        self._stack.enter_context(submission_code())
        return self

    def __exit__(self, *exc, _watch=WATCH):
        import torch
        if not (_watch.active and _watch.dsl_depth == 0) or sys.modules[_WATCH_MODULE].WATCH is not _watch \
                or sys.modules[__name__].WATCH is not _watch:
            # nothing of the harness leaves these changed at the end of a call: the submission did
            _watch.note("changed the harness's watch state (kernelgym_gap.child.integrity.WATCH)")
        intact = (torch._C._len_torch_dispatch_stack() == self._lens[0] + 1
                  and torch._C._get_dispatch_stack_at(self._lens[0]) is self.dispatch
                  and torch._C._len_torch_function_stack() == self._lens[1] + 1
                  and torch._C._get_function_stack_at(self._lens[1]) is self.function)
        if not intact:
            _watch.note("changed torch's mode stacks (removed or added a dispatch/function mode)")
            self._restore_stacks(_watch)
        else:
            self._stack.close()
        self.ops = self.dispatch.ops + self.function.ops
        return False

    def _restore_stacks(self, watch: WatchState) -> None:
        """Puts the mode stacks back as they were before the call, whatever the submission did."""
        import torch
        self._stack.pop_all()
        watch.active, watch.dsl_depth = False, 0
        while torch._C._len_torch_dispatch_stack() > self._lens[0]:
            torch._C._pop_torch_dispatch_stack()
        while torch._C._len_torch_function_stack() > self._lens[1]:
            torch._C._pop_torch_function_stack()


def watching() -> Watching:
    return Watching()


def describe_ops(ops: collections.Counter, limit: int = 6) -> str:
    items = ops.most_common()
    text = ", ".join(f"{name} x{n}" for name, n in items[:limit])
    return text + (f" and {len(items) - limit} more" if len(items) > limit else "")
