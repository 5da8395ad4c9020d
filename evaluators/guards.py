"""Run-time guards installed inside a candidate worker before the candidate is imported.

Runs in the untrusted process. What it records (PyTorch ops dispatched by the candidate, Triton
launches, forbidden calls, replaced harness functions) is reported to the trusted process, which decides.
A candidate shares this process, so every guard here can in principle be subverted; they are one line of
defence among several (static rules before, value checks in the trusted process after), which is why the
trusted side never relies on a worker's word for correctness itself.
"""

from __future__ import annotations

import builtins
import gc
import io
import os
import sys
import sysconfig
import threading
import time
from collections import Counter
from collections.abc import Iterable
from types import CodeType, FrameType
from typing import Any, Callable

import torch

from . import torch_private
from .torch_private import TorchDispatchMode

from .compare import POISON_BITS, INT_VIEW
from .static import ALLOWED_IMPORTS, NAMED_IMPORT_RULES

ALLOC_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
"""Allocation ops whose results are poisoned during correctness trials (unwritten memory is detectable)."""

ALLOWED_OPS = ALLOC_OPS | {
    # constant fills (accumulators, padding)
    "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
    "fill_", "zero_", "scalar_tensor", "resize_",
    # views and metadata
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "as_strided_", "expand", "permute",
    "transpose", "t", "unsqueeze", "squeeze", "select", "slice", "split", "split_with_sizes", "unbind",
    "chunk", "narrow", "alias", "detach", "detach_", "lift_fresh", "lift_fresh_copy", "view_as_real",
    "view_as_complex", "unflatten", "flatten", "movedim", "diagonal", "expand_as", "view_as",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_contiguous", "dim", "size", "stride",
    "numel", "is_same_size", "_has_compatible_shallow_copy_type", "record_stream",
    # layout copies
    "clone", "contiguous", "copy_", "_to_copy", "to", "_copy_from", "_copy_from_and_resize",
}

_getframe = sys._getframe  # captured before `_patch_escapes` wraps it for the candidate
_gc_objects = gc.get_objects  # likewise

_STDLIB_DIRS = tuple(sorted({os.path.join(d, "") for key in ("stdlib", "platstdlib")
                             for d in (sysconfig.get_paths()[key], os.path.realpath(sysconfig.get_paths()[key]))}))
_IMPORT_SYSTEM_FILES = (os.path.join("importlib", "_bootstrap.py"), os.path.join("importlib", "_bootstrap_external.py"))
"""The import system's own files, where Python runs it from source rather than frozen."""

# The dispatch state as the harness reads and repairs it after each forward: bound before any guard wraps
# the module attributes, so the check never goes through a wrapper (nor through anything replaced later).
_DISPATCH_LEN = torch_private.dispatch_stack_len
_DISPATCH_AT = torch_private.dispatch_stack_at
_DISPATCH_PUSH = torch_private.dispatch_stack_push
_DISPATCH_POP = torch_private.dispatch_stack_pop
_KEY_EXCLUDED = torch_private.key_excluded
_SET_KEY_EXCLUDED = torch_private.set_key_excluded
_PYTHON_KEYS = torch_private.PYTHON_DISPATCH_KEYS


class _Launch:
    __slots__ = ("count", "grids", "seconds", "compiled", "arg_bytes")

    def __init__(self) -> None:
        self.count = 0
        self.grids: list[list[int]] = []
        self.seconds = 0.0
        self.compiled: dict[str, Any] = {}
        self.arg_bytes = 0
        """distinct tensor-argument bytes, summed over the launches since the last `take()` (`argument_bytes`)"""


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def argument_bytes(values: Iterable[Any]) -> int:
    """Bytes of the distinct memory the tensor arguments of one launch span: each tensor's extent (from its
    data pointer, sizes and strides), overlapping extents (the same storage passed twice, views of one
    buffer) counted once. A kernel that reads each input and writes each output once moves about this
    much, so it is the launch's own floor on traffic, shown to the roles as an estimate where no counters
    exist. Metadata only (no device sync, no op dispatched), so it costs about a microsecond per tensor;
    only plain tensors (and parameters) one level into tuples are read, so no candidate code runs here."""
    spans: list[tuple[int, int]] = []
    for value in values:
        for v in value if type(value) in (tuple, list) else (value,):
            if type(v) not in _PLAIN_TENSORS:
                continue
            try:  # a layout without one extent (sparse, no storage) is left out: this is evidence, not a check
                if v.is_contiguous():
                    extent = v.nbytes
                else:
                    extent = 1
                    for size, stride in zip(v.shape, v.stride()):
                        if size == 0:
                            extent = 0
                            break
                        extent += (size - 1) * abs(stride)
                    extent *= v.element_size()
                start = v.data_ptr() if extent else 0
            except Exception:  # noqa: BLE001 - never fail a launch over its bookkeeping
                continue
            if extent:
                spans.append((start, start + extent))
    spans.sort()
    total, end = 0, 0
    for a, b in spans:
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def compiled_info(kernel: Any) -> dict[str, Any]:
    """Registers, spills, shared memory, warps and stages of a compiled Triton kernel (empty if unknown)."""
    meta = getattr(kernel, "metadata", None)
    if meta is None:
        return {}
    info: dict[str, Any] = {}
    for key, value in (("registers", getattr(kernel, "n_regs", None)), ("spills", getattr(kernel, "n_spills", None)),
                       ("shared_bytes", getattr(meta, "shared", None)), ("num_warps", getattr(meta, "num_warps", None)),
                       ("num_stages", getattr(meta, "num_stages", None))):
        if isinstance(value, (int, float)):
            info[key] = int(value)
    return info


class Guard:
    """State shared by every hook: what the candidate did since the last `take()`."""

    def __init__(self, candidate_file: str, device: torch.device) -> None:
        self.candidate_file = candidate_file
        self.device = device
        self.in_launch = 0
        self.forward_active = False
        self.measure_bytes = True
        """whether launches record their arguments' bytes (`argument_bytes`): off while timed repetitions run, so
        that the bookkeeping adds no host time between a candidate's launches there"""
        self.poison = False
        self.prepoison: Any = None
        """the free device memory poisoned before the current call (`poison.Prepoison`), set by the worker"""
        self.allow_streams = False
        self.ops: Counter[str] = Counter()
        self.violations: list[str] = []
        self.launches: dict[str, _Launch] = {}
        self.package_dirs = tuple(
            os.path.dirname(m.__file__) + os.sep
            for m in (torch, sys.modules.get("triton"), sys.modules.get("numpy"))
            if m is not None and getattr(m, "__file__", None)
        )
        self.library_dirs = self.package_dirs + (os.path.dirname(__file__) + os.sep,)
        self.torch_dir = os.path.dirname(torch.__file__) + os.sep
        paths = sysconfig.get_paths()
        self.module_dirs = self.library_dirs + _STDLIB_DIRS + tuple(
            {os.path.join(paths[k], "") for k in ("purelib", "platlib")})
        self.foreign_dirs = tuple(d for d in self.library_dirs if d != self.torch_dir)
        self._originals: dict[str, Any] = {}
        if device.type == "cuda":
            self.current_stream = torch.cuda.current_stream
            self.default_stream = torch.cuda.default_stream
        self._installed: dict[str, Any] = {}

    # -- provenance -----------------------------------------------------------------------------------

    def op_from_candidate(self, depth: int = 2) -> bool:
        """Whether an aten op being dispatched was called by the candidate's code, directly or through
        PyTorch's own Python layers, rather than by Triton (the interpreter's bookkeeping inside a launch)
        or the harness. Inside a launch this decides, so neither a kernel body that calls PyTorch (the CPU
        interpreter runs it as Python) nor a candidate that fakes `in_launch` hides its ops."""
        frame = _getframe(depth)
        while frame is not None:
            fn = frame.f_code.co_filename
            if fn == self.candidate_file:
                return True
            if fn.startswith(self.foreign_dirs):
                return False
            frame = frame.f_back
        return False

    def is_candidates(self, frame: FrameType) -> bool:
        """Whether `frame` runs the candidate's code: its file, or anything running in its module's namespace
        (the __init__ a dataclass generates there, a function built from its code objects). Other code made
        at run time (exec'd text, a code object built by hand) decides nothing either way: it is judged by
        who runs it, further out on the stack, or by the forward it runs in."""
        if frame.f_code.co_filename == self.candidate_file:
            return True
        named = frame.f_globals.get("__file__")
        return type(named) is str and named == self.candidate_file

    def importing(self, frame: FrameType) -> bool:
        """Whether `frame` is the body of a library module being imported (PyTorch importing its compiler
        stack lazily, SymPy reading frames as it defines itself): a module of a trusted location, executed by
        the import system, whose namespace is that module's own."""
        code = frame.f_code
        fn = code.co_filename
        if code.co_name != "<module>" or not fn.startswith(self.module_dirs):
            return False
        caller = frame.f_back
        loader = caller.f_code.co_filename if caller is not None else ""
        if not (loader.startswith("<frozen importlib") or loader.endswith(_IMPORT_SYSTEM_FILES)):
            return False
        name = frame.f_globals.get("__name__")
        module = sys.modules.get(name) if type(name) is str else None
        return getattr(module, "__dict__", None) is frame.f_globals and getattr(module, "__file__", None) == fn

    def acting_for_candidate(self, frame: FrameType | None, names: Iterable[str], *, escape: bool = False,
                             own_use: Callable[[FrameType, set[str]], bool] | None = None) -> bool:
        """Whether a guarded call, made from `frame` under one of `names`, is the candidate's doing.

        The whole stack is judged, from `frame` outward, never only the immediate caller: code that merely
        forwards a callable it was handed (functools.partial, a property, a dataclass's generated __init__,
        a decorator, a hook list, the standard library) decides nothing, so whoever handed it over is found.
        - The candidate's code anywhere on the stack (`is_candidates`) decides: it is. Code generated at run
          time is only forwarding: whoever runs it is found further out.
        - `escape=False` (files, threads, processes, streams, host reads): a PyTorch, Triton, NumPy or
          harness frame whose code calls the function by name (or calls the standard-library function the
          walk came through by name, as Triton calls `subprocess.run` for ptxas) decides: it is the
          library's own use. A library frame that only forwards is passed over.
        - `escape=True` (the dispatch and tracing switches, frame and heap introspection): no library is
          trusted by default; only `own_use(frame, names seen)`, an audited list of library code that uses
          the switch for itself and hands nothing back, decides for it.
        - A refusing wrapper already let through further out, the op recorder switching itself on or off
          for the harness, or the body of a module being imported (a library initialising itself, as
          PyTorch importing its compiler stack lazily, SymPy reading frames at import) decides: it is not.
        With no decision, the call is the candidate's exactly while its forward runs (a hook PyTorch calls
        for it, with none of its frames on the stack)."""
        wanted = set(names)
        while frame is not None:
            code = frame.f_code
            if code is _REFUSING_CODE or code in _RECORDER_SWITCH_CODES:
                return False
            if self.is_candidates(frame):
                return True
            if self.importing(frame):
                return False
            library = code.co_filename.startswith(self.library_dirs)
            if escape:
                if own_use is not None and own_use(frame, wanted):
                    return False
            elif library and not wanted.isdisjoint(code.co_names):
                return False
            if escape or not library:
                name = code.co_name
                if not name.startswith("<") and not (name.startswith("__") and name.endswith("__")):
                    wanted.add(name)
            frame = frame.f_back
        return self.forward_active

    def candidate_anywhere(self, frame: FrameType | None) -> bool:
        """Whether any frame from `frame` outward is the candidate's, or its forward is running."""
        while frame is not None:
            if self.is_candidates(frame):
                return True
            frame = frame.f_back
        return self.forward_active

    def harness_frame(self, frame: FrameType | None) -> bool:
        """Whether `frame` is the harness's own code: a real source file that is neither the candidate's nor
        PyTorch's, Triton's, NumPy's or the standard library's (what a hook or a partial would be called by)."""
        if frame is None or self.is_candidates(frame):
            return False
        fn = frame.f_code.co_filename
        return not fn.startswith("<") and not fn.startswith(self.package_dirs) and not fn.startswith(_STDLIB_DIRS)

    def audited_use(self, frame: FrameType, wanted: set[str]) -> bool:
        """Whether `frame` is library code audited to use a dispatch switch for itself (`AUDITED_SWITCH_USERS`)
        and names one of `wanted`."""
        code = frame.f_code
        fn = code.co_filename
        if not fn.startswith(self.torch_dir):
            return False
        where = (fn[len(self.torch_dir):].replace(os.sep, "/"), code.co_name)
        return where in AUDITED_SWITCH_USERS and not wanted.isdisjoint(code.co_names)

    def check_dispatch_state(self, recorder: "OpRecorder") -> None:
        """After a forward: the recorder must still be the top of PyTorch's dispatch-mode stack and dispatch
        to Python modes must be on. Whatever the candidate did to either (however it reached the switch) is
        recorded as a violation and undone (modes it left are dropped, the recorder put back where it was),
        so the next call is recorded again."""
        modes = [_DISPATCH_AT(i) for i in range(_DISPATCH_LEN())]
        if not any(m is recorder for m in modes):
            self.violation("the op recorder was taken off PyTorch's dispatch-mode stack during the forward "
                           "(switching the op record off)")
            while _DISPATCH_LEN() > getattr(recorder, "below", 0):
                _DISPATCH_POP(None)
            _DISPATCH_PUSH(recorder)
        elif modes[-1] is not recorder:
            self.violation("a dispatch mode was left above the op recorder after the forward "
                           "(intercepting ops before the op record sees them)")
            while _DISPATCH_AT(_DISPATCH_LEN() - 1) is not recorder:
                _DISPATCH_POP(None)
        for key in _PYTHON_KEYS:
            if _KEY_EXCLUDED(key):
                self.violation(f"dispatch key {key.name} was left excluded after the forward "
                               "(switching the op record off)")
                _SET_KEY_EXCLUDED(key, False)

    def violation(self, what: str) -> None:
        if len(self.violations) < 50:
            self.violations.append(what)

    # -- accounting -----------------------------------------------------------------------------------

    def take(self) -> dict[str, Any]:
        """What was recorded since the last call, and reset."""
        rec = {
            "ops": dict(self.ops),
            "violations": list(self.violations),
            "launches": {k: {"count": v.count, "grids": v.grids[:4], "seconds": v.seconds, "compiled": v.compiled,
                             "arg_bytes": v.arg_bytes}
                         for k, v in self.launches.items()},
        }
        self.ops.clear()
        self.violations.clear()
        self.launches.clear()
        return rec

    def record_launch(self, name: str, grid: Any, seconds: float, kernel: Any = None,
                      args: Iterable[Any] = ()) -> None:
        """Count one launch of kernel `name`: its grid, wall `seconds`, compiled resources and the bytes its
        tensor arguments (`args`, positional and keyword values) span (`argument_bytes`)."""
        entry = self.launches.setdefault(name, _Launch())
        entry.count += 1
        entry.seconds += seconds
        if self.measure_bytes:
            entry.arg_bytes += argument_bytes(args)
        if not entry.compiled and kernel is not None:
            entry.compiled = compiled_info(kernel)
        if isinstance(grid, tuple) and len(entry.grids) < 4:
            g = [int(x) for x in grid if isinstance(x, int)]
            if g not in entry.grids:
                entry.grids.append(g)

    # -- identity checks ------------------------------------------------------------------------------

    def snapshot(self) -> None:
        """Remember the identity of every function the harness relies on (after our own hooks are in)."""
        self._identities = {name: _resolve(name) for name in WATCHED}

    def tampered(self) -> list[str]:
        changed = []
        for name, ident in self._identities.items():
            try:
                now = _resolve(name)
            except Exception:
                now = None
            if now is not ident:
                changed.append(name)
        return changed


WATCHED = [
    "torch.allclose", "torch.equal", "torch.isclose", "torch.cuda.synchronize", "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.record", "torch.cuda.Event.synchronize", "torch.cuda.current_stream",
    "time.perf_counter", "time.perf_counter_ns", "time.monotonic", "time.time",
    "torch.Tensor.__eq__", "torch.Tensor.numpy", "torch.Tensor.tolist", "torch.Tensor.item", "torch.Tensor.cpu",
    "torch.Tensor.copy_", "torch.Tensor.clone", "torch.Tensor.contiguous", "torch.Tensor.to",
    "torch.nn.Module.__call__", "torch.nn.Module._call_impl", "torch.nn.Module.load_state_dict",
    "builtins.open", "builtins.__import__", "os._exit", "os.fork", "os.system", "threading.Thread.start",
    "socket.socket.sendall", "socket.socket.send", "socket.socket.recv_into",
    "triton.runtime.jit.JITFunction.run", "triton.runtime.autotuner.Autotuner.run",
    "torch.utils._python_dispatch.TorchDispatchMode.__enter__",
    "torch.utils._python_dispatch.TorchDispatchMode.__exit__",
    "kernelwright.evaluators.guards.OpRecorder.__torch_dispatch__",
    "kernelwright.evaluators.guards.OpRecorder.__enter__", "kernelwright.evaluators.guards.OpRecorder.__exit__",
    "kernelwright.evaluators.guards.Guard.take", "kernelwright.evaluators.guards.Guard.tampered",
    "kernelwright.evaluators.guards.Guard.acting_for_candidate", "kernelwright.evaluators.guards.Guard.is_candidates",
    "kernelwright.evaluators.guards.Guard.candidate_anywhere", "kernelwright.evaluators.guards.Guard.harness_frame",
    "kernelwright.evaluators.guards.Guard.check_dispatch_state",
    "kernelwright.evaluators.wire.send", "kernelwright.evaluators.wire.tensor_bytes",
]


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is not None:
            obj: Any = mod
            for p in parts[i:]:
                obj = obj.__dict__[p] if isinstance(obj, type) and p in obj.__dict__ else getattr(obj, p)
            return obj
    raise LookupError(dotted)


class OpRecorder(TorchDispatchMode):
    """Records every aten op the candidate dispatches outside its Triton launches; poisons fresh allocations."""

    def __init__(self, guard: Guard) -> None:
        super().__init__()
        self.guard = guard

    def __enter__(self) -> "OpRecorder":
        # Only the harness switches the record on or off: not the candidate, nor PyTorch calling a bound
        # method the candidate handed it as a hook. The dispatch-stack switches let these two frames through.
        if not self.guard.harness_frame(_getframe(1)):
            self.guard.violation("switching the op recorder (it belongs to the harness)")
            raise PermissionError("kernelwright: the op recorder belongs to the harness")
        super().__enter__()
        self.below = _DISPATCH_LEN() - 1  # the modes under it, for `Guard.check_dispatch_state` to restore
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.guard.harness_frame(_getframe(1)):
            self.guard.violation("switching the op recorder off (it belongs to the harness)")
            raise PermissionError("kernelwright: the op recorder belongs to the harness")
        self.guard.check_dispatch_state(self)
        super().__exit__(*exc)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        g = self.guard
        if g.in_launch and not g.op_from_candidate():
            return out
        name = func.overloadpacket.__name__
        if name not in ALLOWED_OPS:
            g.ops[name] += 1
        elif name == "_to_copy" and isinstance(out, torch.Tensor) and out.device != g.device:
            g.ops["_to_copy(to another device)"] += 1
        elif name in ALLOC_OPS and g.poison and isinstance(out, torch.Tensor) \
                and not (g.prepoison is not None and g.prepoison.covers(out)):
            _poison(out)  # memory the pre-call poison did not reach (`poison.py`): fill it now, in any call
        return out


_RECORDER_SWITCH_CODES = frozenset({OpRecorder.__enter__.__code__, OpRecorder.__exit__.__code__})


def _poison(t: torch.Tensor) -> None:
    bits = POISON_BITS.get(t.dtype)
    if bits is None or t.numel() == 0:
        return
    try:
        view = t.view(INT_VIEW[t.dtype]) if t.dtype in INT_VIEW else t
        view.fill_(bits)
    except RuntimeError:
        pass


def install(guard: Guard) -> None:
    """Patch the process: Triton launch accounting and forbidden calls. Call once, before the candidate loads."""
    _patch_triton(guard)
    _patch_forbidden(guard)
    _patch_escapes(guard)


def _patch_triton(guard: Guard) -> None:
    import triton.runtime.jit as jit

    targets: list[Any] = [jit.JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction

        targets.append(InterpretedFunction)
    except Exception:  # pragma: no cover - interpreter missing in some builds
        pass
    for cls in targets:
        original = cls.run

        def run(self: Any, *args: Any, __original: Callable = original, **kwargs: Any) -> Any:
            if kwargs.get("warmup"):
                return __original(self, *args, **kwargs)
            name = getattr(getattr(self, "fn", None), "__name__", None) or getattr(self, "__name__", "kernel")
            guard.in_launch += 1
            t0 = time.perf_counter()
            kernel = None
            if guard.forward_active and guard.device.type == "cuda" and not guard.allow_streams \
                    and guard.current_stream() != guard.default_stream():
                # However the stream was obtained, a launch off the default stream is work the timing
                # stream's events would not see.
                guard.violation(f"launching {name} on a side CUDA stream")
            try:
                kernel = __original(self, *args, **kwargs)
                return kernel
            finally:
                guard.in_launch -= 1
                if guard.forward_active:
                    guard.record_launch(name, kwargs.get("grid"), time.perf_counter() - t0, kernel,
                                        (*args, *kwargs.values()))

        cls.run = run

    try:
        from triton.runtime.autotuner import Autotuner
    except Exception:  # pragma: no cover
        return
    original_tune = Autotuner.run

    def tune_run(self: Any, *args: Any, __original: Callable = original_tune, **kwargs: Any) -> Any:
        # Autotuning benchmarks with PyTorch ops of Triton's own; they are not the candidate's compute.
        guard.in_launch += 1
        try:
            return __original(self, *args, **kwargs)
        finally:
            guard.in_launch -= 1

    # Launches inside the autotuner still reach JITFunction.run, which records them (in_launch only
    # suppresses op recording, not launch accounting).
    Autotuner.run = tune_run


def _refusing(guard: Guard, what: str, original: Callable, judge: Callable[[FrameType | None], bool], *,
              fatal: bool = True) -> Callable:
    """`original` behind a judgement of the whole stack of whoever calls it (`judge`, given the caller's frame):
    a call judged the candidate's is recorded as a violation and, when `fatal`, refused with PermissionError.
    Every guard that refuses is made here, so one code object marks them all on a stack (`_REFUSING_CODE`)."""
    def refusing(*args: Any, **kwargs: Any) -> Any:
        if judge(_getframe(1)):
            guard.violation(what)
            if fatal:
                raise PermissionError(f"kernelwright: {what} is not allowed in a candidate")
        return original(*args, **kwargs)

    return refusing


_REFUSING_CODE = next(c for c in _refusing.__code__.co_consts if isinstance(c, CodeType))


def _unwrapped(frame: FrameType | None) -> FrameType | None:
    """`frame`, or the first frame outward of it that is not a refusing wrapper's."""
    while frame is not None and frame.f_code is _REFUSING_CODE:
        frame = frame.f_back
    return frame


def _facility(guard: Guard, *names: str) -> Callable[[FrameType | None], bool]:
    """The judgement for a facility libraries use for themselves (files, threads, processes): see
    `Guard.acting_for_candidate` with `escape=False`."""
    wanted = frozenset(names)
    return lambda frame: guard.acting_for_candidate(frame, wanted)


def _patch_forbidden(guard: Guard) -> None:
    def forbid(what: str, original: Callable, *names: str) -> Callable:
        return _refusing(guard, what, original, _facility(guard, *names))

    for name in ("fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "execv", "execve",
                 "execvp", "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv", "spawnve", "spawnl",
                 "spawnle", "kill", "killpg", "putenv", "unsetenv", "chdir", "setsid"):
        if hasattr(os, name):
            setattr(os, name, forbid(f"os.{name}", getattr(os, name), name))
    os._exit = forbid("os._exit (exiting early)", os._exit, "_exit")
    threading.Thread.start = forbid("starting a thread", threading.Thread.start, "start")
    import _thread

    _thread.start_new_thread = forbid("starting a thread", _thread.start_new_thread, "start_new_thread", "start_new")
    if hasattr(_thread, "start_joinable_thread"):
        _thread.start_joinable_thread = forbid("starting a thread", _thread.start_joinable_thread,
                                               "start_joinable_thread")
    # threading keeps its own references to the _thread functions; a candidate can reach them too.
    for alias in ("_start_new_thread", "_start_joinable_thread"):
        if hasattr(threading, alias):
            setattr(threading, alias, forbid("starting a thread", getattr(threading, alias), alias, alias[1:]))
    import subprocess

    subprocess.Popen.__init__ = forbid("starting a process", subprocess.Popen.__init__, "Popen")
    builtins.open = forbid("opening a file", builtins.open, "open")
    io.open = builtins.open
    torch.compile = _refusing(guard, "torch.compile", torch.compile, lambda frame: True)
    if torch.cuda.is_available():
        # Creating a stream object is what torch.cuda.current_stream() does too; only the candidate's count.
        judge_new = _facility(guard, "Stream")
        torch.cuda.Stream.__new__ = _refusing(
            guard, "creating a CUDA stream", torch.cuda.Stream.__new__,
            lambda frame: not guard.allow_streams and judge_new(frame), fatal=False)
        set_stream = torch.cuda.set_stream

        def guarded_set_stream(stream: Any) -> Any:
            # torch.cuda.stream(s) switches through set_stream (PyTorch's frame calls it by name for whoever
            # entered the context), so any frame of the candidate's decides; the default stream is always allowed.
            if not guard.allow_streams and stream is not None and guard.candidate_anywhere(_getframe(1)) \
                    and stream != torch.cuda.default_stream(stream.device):
                guard.violation("switching to a side CUDA stream")
            return set_stream(stream)

        torch.cuda.set_stream = guarded_set_stream

    original_import = builtins.__import__

    def guarded_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        # A module is imported into a namespace, so the namespace decides: the candidate's module (its own
        # code, and the __init__ a dataclass generates in it). PyTorch's C++ side imports with the calling
        # frame's globals too, which is why torch/triton modules pass `_import_allowed`; a library frame
        # importing for itself is left alone, and so is Triton's generated argument binder, whose native
        # helper imports as it specialises arguments (what a forwarded import yields is a module already
        # reachable as an attribute: the run-time guards on what modules do are the line that matters).
        named = globals.get("__file__") if isinstance(globals, dict) else None
        if (type(named) is str and named == guard.candidate_file) or \
                _getframe(1).f_code.co_filename == guard.candidate_file:
            if not _import_allowed(name):
                guard.violation(f"importing {name!r}")
                raise ImportError(f"kernelwright: importing {name!r} is not allowed in a candidate")
        return original_import(name, globals, locals, fromlist, level)

    builtins.__import__ = guarded_import

    # Reading tensor values on the host during forward. Printing reads them without dispatching any aten
    # op (so the op record would not see it): repr/format at full precision is a host compute path too.
    host_names = {"numpy": ("numpy",), "tolist": ("tolist",), "__array__": ("__array__", "array", "asarray"),
                  "__dlpack__": ("__dlpack__", "from_dlpack"), "__repr__": ("__repr__", "repr", "str", "print"),
                  "__format__": ("__format__", "format")}
    for attr, names in host_names.items():
        judge_host = _facility(guard, *names)
        setattr(torch.Tensor, attr, _refusing(
            guard, f"Tensor.{attr}() (reading tensor values on the host)", getattr(torch.Tensor, attr),
            lambda frame, judge_host=judge_host: guard.forward_active and judge_host(frame), fatal=False))


DISPATCH_SWITCHES: dict[str, tuple[str, ...]] = {
    "torch._C": (
        # guards that exclude, include or force dispatch keys (the Python key, the op record's way in)
        "_DisableTorchDispatch", "_ExcludeDispatchKeyGuard", "ExcludeDispatchKeyGuard", "_IncludeDispatchKeyGuard",
        "_ForceDispatchKeyGuard", "_PreserveDispatchKeyGuard", "_SetExcludeDispatchKeyGuard",
        "_RestorePythonTLSSnapshot", "_DisablePythonDispatcher", "_EnablePythonDispatcher", "_EnablePreDispatch",
        "_DisableFuncTorch", "_AutoDispatchBelowAutograd", "_AutoDispatchBelowADInplaceOrView", "_DisableAutocast",
        "_dispatch_tls_set_dispatch_key_excluded", "_dispatch_tls_set_dispatch_key_included",
        # the dispatch-mode stack and the infra-mode slots: read (the recorder itself), push, pop, set, unset
        "_len_torch_dispatch_stack", "_get_dispatch_stack_at", "_push_on_torch_dispatch_stack",
        "_pop_torch_dispatch_stack", "_get_dispatch_mode", "_set_dispatch_mode", "_unset_dispatch_mode",
        # running any callable with dispatch to Python off; calling an op's kernel boxed; registering kernels
        "_disabled_torch_dispatch_impl", "_dispatch_call_boxed", "_dispatch_library",
        # TorchScript tracing
        "_set_tracing_state",
    ),
    "torch.utils._python_dispatch": (
        "_disable_current_modes", "_get_current_dispatch_mode", "_get_current_dispatch_mode_stack", "_pop_mode",
        "_pop_mode_temporarily", "_push_mode", "_detect_infra_mode", "_unset_infra_mode", "_disable_infra_mode",
    ),
}
"""PyTorch's private switches for dispatch and tracing, by module: whatever name or indirection reaches one,
it ends at the wrapper (module functions are replaced wherever a module holds them; classes have their
__init__ and __enter__ replaced on the class itself), and the candidate's stack is refused. Names missing
from the installed PyTorch are skipped (the worker runs on several versions)."""

SWITCH_METHODS: dict[str, tuple[str, ...]] = {
    # an op's kernel for one dispatch key, below the Python key: `op.redispatch(keyset, ...)`
    "torch._ops.OpOverload": ("redispatch",),
    "torch._C._DispatchOperatorHandle": ("redispatch_boxed",),
    # a kernel registered over an aten op's (below the Python key, so its own PyTorch calls go unrecorded)
    "torch._C._DispatchModule": ("impl", "impl_t_t", "impl_with_aoti_compile", "def_", "def_legacy",
                                 "def_name_t_t", "def_schema_t_t", "define", "fallback", "fallback_fallthrough",
                                 "register_ad_inplace_or_view_fallback"),
}
"""Methods that switch dispatch, replaced on their classes (so every instance, however reached, has them);
OpOverload's per-instance `_op_dk` (the same as redispatch, for one key) is a class property over them."""

INTROSPECTION: dict[str, tuple[str, ...]] = {
    "gc": ("get_objects", "get_referrers", "get_referents"),
    "sys": ("_current_frames", "settrace", "setprofile"),
    "threading": ("settrace", "setprofile"),
    "inspect": ("currentframe", "stack", "trace"),
}
"""Ways to reach the harness's own objects and frames (sys._getframe has its own wrapper)."""

AUDITED_SWITCH_USERS = frozenset({
    ("_tensor_str.py", "_str"),  # printing a tensor (refused anyway during the forward: a host read)
})
"""Library code (path under torch/, function) that uses a dispatch switch for itself and hands nothing to its
caller: the only callers let through while the candidate's code is on the stack."""

FRAME_USERS: dict[str, frozenset[str] | str | None] = {
    "typing.py": None, "enum.py": None, "warnings.py": None, "subprocess.py": None,
    os.path.join("collections", "__init__.py"): None,
    "traceback.py": frozenset({"print_stack", "format_stack", "extract_stack"}),
    os.path.join("logging", "__init__.py"): "internal",
}
"""Standard-library modules that read a frame for their own bookkeeping and hand back no frame: a caller's
module name (typing, enum, namedtuple), a warning's registry, the text of a stack (PyTorch's lazy CUDA calls
keep one from torch.manual_seed). None: any of the module's functions; a set: only those functions;
"internal": only when called from the same module (logging.currentframe() itself returns a frame)."""


def _frame_user(guard: Guard, frame: FrameType, wanted: set[str]) -> bool:
    """Whether `frame` reads a frame for itself: a `FRAME_USERS` module of the standard library or audited
    library code, calling one of `wanted` by name."""
    code = frame.f_code
    if wanted.isdisjoint(code.co_names):
        return False
    fn = code.co_filename
    for base in _STDLIB_DIRS:
        if fn.startswith(base):
            rule = FRAME_USERS.get(fn[len(base):], False)
            if rule is None:
                return True
            if isinstance(rule, frozenset):
                return code.co_name in rule
            if rule == "internal":
                outer = frame.f_back
                return outer is not None and outer.f_code.co_filename == fn
    return guard.audited_use(frame, wanted)


def _replace_everywhere(original: Any, replacement: Any) -> None:
    """Point every module-level name bound to `original` at `replacement` (`from torch._C import X` copies
    taken at import time included), so no module attribute leads past the wrapper; this module's own
    bindings (the originals the harness's checks call) stay."""
    for mod in list(sys.modules.values()):
        namespace = getattr(mod, "__dict__", None)
        if not isinstance(namespace, dict) or namespace is globals():
            continue
        for key, value in list(namespace.items()):
            if value is original:
                namespace[key] = replacement


def _patch_escapes(guard: Guard) -> None:
    import inspect  # noqa: F401 - imported so sys.modules has every module of INTROSPECTION

    # torch._ops and torch.utils._python_dispatch, every owner of SWITCH_METHODS, are in sys.modules: torch_private
    # imported them

    def switch_judge(*names: str) -> Callable[[FrameType | None], bool]:
        wanted = frozenset(names)
        return lambda frame: guard.acting_for_candidate(frame, wanted, escape=True, own_use=guard.audited_use)

    def refuse(what: str, original: Callable, judge: Callable[[FrameType | None], bool]) -> Callable:
        return _refusing(guard, f"{what} (switching the op record off or reaching into the harness)", original, judge)

    for module, names in DISPATCH_SWITCHES.items():
        mod = sys.modules[module]
        for name in names:
            original = getattr(mod, name, None)
            if original is None:
                continue
            judge = switch_judge(name)
            if isinstance(original, type):
                # The class itself: every alias of it (torch.utils._mode_utils.no_dispatch is one) and every
                # instance, however made, goes through these.
                for method in ("__init__", "__enter__"):
                    if method in original.__dict__:
                        setattr(original, method, refuse(f"{module}.{name}", original.__dict__[method], judge))
            else:
                _replace_everywhere(original, refuse(f"{module}.{name}", original, judge))

    for dotted, methods in SWITCH_METHODS.items():
        owner_name, _, cls_name = dotted.rpartition(".")
        cls = getattr(sys.modules[owner_name], cls_name, None)
        for method in methods:
            original = cls.__dict__.get(method) if cls is not None else None
            if original is not None:
                setattr(cls, method, refuse(f"{dotted}.{method}", original, switch_judge(method)))
    _guard_op_dk(guard, refuse, switch_judge("_op_dk"))

    for module, names in INTROSPECTION.items():
        mod = sys.modules[module]
        for name in names:
            original = getattr(mod, name, None)
            if original is not None:
                _replace_everywhere(original, refuse(f"{module}.{name}", original, switch_judge(name)))

    frame_names = frozenset({"_getframe"})

    def getframe(depth: int = 0) -> Any:
        caller = _getframe(1)
        if guard.acting_for_candidate(caller, frame_names, escape=True,
                                      own_use=lambda f, w: _frame_user(guard, f, w)):
            guard.violation("sys._getframe (walking the harness's frames)")
            raise PermissionError("kernelwright: sys._getframe is not allowed in a candidate")
        # Counted as if no wrapper were on the stack: inspect.currentframe() (wrapped, and itself calling
        # sys._getframe(1)) must still hand its caller's frame to the library that asked for it.
        frame = _unwrapped(caller)
        for _ in range(depth):
            frame = _unwrapped(frame.f_back) if frame is not None else None
        if frame is None:
            raise ValueError("call stack is not deep enough")
        return frame

    sys._getframe = getframe


def _guard_op_dk(guard: Guard, refuse: Callable, judge: Callable[[FrameType | None], bool]) -> None:
    """OpOverload keeps `_op_dk` (call the op's kernel for one dispatch key, skipping the Python key) on each
    instance. A property on the class takes it over: the originals move out of every instance's __dict__,
    and each read hands out the refusing wrapper."""
    OpOverload = torch_private.OpOverload

    kept: dict[int, tuple[Any, Callable]] = {}  # id(op) -> (op, wrapped _op_dk); ops live as long as torch

    def store(op: Any, value: Callable) -> None:
        kept[id(op)] = (op, refuse("OpOverload._op_dk", value, judge))

    def read(op: Any) -> Callable:
        entry = kept.get(id(op))
        if entry is None or entry[0] is not op:
            raise AttributeError("_op_dk")
        return entry[1]

    for obj in _gc_objects():
        if issubclass(type(obj), OpOverload):  # type(), not isinstance: no object's __class__ runs here
            namespace = getattr(obj, "__dict__", None)
            if isinstance(namespace, dict) and "_op_dk" in namespace:
                store(obj, namespace.pop("_op_dk"))
    OpOverload._op_dk = property(read, store)


def _import_allowed(module: str) -> bool:
    """Run-time import rule. PyTorch's C++ side imports its own submodules with the candidate's frame on
    top of the stack, so torch/triton internals cannot be told apart here and are left to the static
    rule; the dangerous modules (os, sys, threading, ctypes, numpy, ...) are always refused."""
    parts = module.split(".")
    if parts[0] in ("torch", "triton"):
        return module not in NAMED_IMPORT_RULES
    if module in NAMED_IMPORT_RULES or parts[0] in NAMED_IMPORT_RULES:
        return False
    return any(".".join(parts[:i]) in ALLOWED_IMPORTS for i in range(len(parts), 0, -1)) or module in sys.modules
