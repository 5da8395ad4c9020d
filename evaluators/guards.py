"""Run-time guards installed inside a candidate worker before the candidate is imported.

Runs in the untrusted process. What it records (PyTorch ops dispatched by the candidate, Triton
launches, forbidden calls, replaced harness functions) is reported to the trusted process, which decides.
A candidate shares this process, so every guard here can in principle be subverted; they are one line of
defence among several (static rules before, value checks in the trusted process after), which is why the
trusted side never relies on a worker's word for correctness itself.
"""

from __future__ import annotations

import builtins
import io
import os
import sys
import threading
import time
from collections import Counter
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

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


class _Launch:
    __slots__ = ("count", "grids", "seconds", "compiled")

    def __init__(self) -> None:
        self.count = 0
        self.grids: list[list[int]] = []
        self.seconds = 0.0
        self.compiled: dict[str, Any] = {}


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
        self.poison = False
        self.allow_streams = False
        self.ops: Counter[str] = Counter()
        self.violations: list[str] = []
        self.launches: dict[str, _Launch] = {}
        self.library_dirs = tuple(
            os.path.dirname(m.__file__) + os.sep
            for m in (torch, sys.modules.get("triton"), sys.modules.get("numpy"))
            if m is not None and getattr(m, "__file__", None)
        ) + (os.path.dirname(__file__) + os.sep,)
        torch_dir = os.path.dirname(torch.__file__) + os.sep
        self.foreign_dirs = tuple(d for d in self.library_dirs if d != torch_dir)
        self._originals: dict[str, Any] = {}
        if device.type == "cuda":
            self.current_stream = torch.cuda.current_stream
            self.default_stream = torch.cuda.default_stream
        self._installed: dict[str, Any] = {}

    # -- provenance -----------------------------------------------------------------------------------

    def called_from_candidate(self, depth: int = 2) -> bool:
        """Whether the nearest non-stdlib frame on the stack is the candidate's own code."""
        frame = _getframe(depth)
        while frame is not None:
            fn = frame.f_code.co_filename
            if fn == self.candidate_file:
                return True
            if fn.startswith(self.library_dirs):
                return False
            frame = frame.f_back
        return False

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

    def called_directly_by_candidate(self, depth: int = 2) -> bool:
        """Whether the frame that called the hook is the candidate's own code."""
        frame = _getframe(depth)
        return frame is not None and frame.f_code.co_filename == self.candidate_file

    def candidate_on_stack(self) -> bool:
        """Whether any frame on the stack is the candidate's (libraries acting for it included)."""
        frame = _getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == self.candidate_file:
                return True
            frame = frame.f_back
        return False

    def violation(self, what: str) -> None:
        if len(self.violations) < 50:
            self.violations.append(what)

    # -- accounting -----------------------------------------------------------------------------------

    def take(self) -> dict[str, Any]:
        """What was recorded since the last call, and reset."""
        rec = {
            "ops": dict(self.ops),
            "violations": list(self.violations),
            "launches": {k: {"count": v.count, "grids": v.grids[:4], "seconds": v.seconds, "compiled": v.compiled}
                         for k, v in self.launches.items()},
        }
        self.ops.clear()
        self.violations.clear()
        self.launches.clear()
        return rec

    def record_launch(self, name: str, grid: Any, seconds: float, kernel: Any = None) -> None:
        entry = self.launches.setdefault(name, _Launch())
        entry.count += 1
        entry.seconds += seconds
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
    "kernelwright.evaluators.guards.Guard.take", "kernelwright.evaluators.guards.Guard.tampered",
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
        elif name in ALLOC_OPS and g.poison and isinstance(out, torch.Tensor):
            _poison(out)
        return out


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
                    guard.record_launch(name, kwargs.get("grid"), time.perf_counter() - t0, kernel)

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


def _patch_forbidden(guard: Guard) -> None:
    def forbid(what: str, original: Callable, always: bool = False) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if always or guard.called_from_candidate():
                guard.violation(what)
                raise PermissionError(f"kernelwright: {what} is not allowed in a candidate")
            return original(*args, **kwargs)

        return wrapper

    for name in ("fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "execv", "execve",
                 "execvp", "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv", "spawnve", "spawnl",
                 "spawnle", "kill", "killpg", "putenv", "unsetenv", "chdir", "setsid"):
        if hasattr(os, name):
            setattr(os, name, forbid(f"os.{name}", getattr(os, name)))
    os._exit = forbid("os._exit (exiting early)", os._exit)
    threading.Thread.start = forbid("starting a thread", threading.Thread.start)
    import _thread

    _thread.start_new_thread = forbid("starting a thread", _thread.start_new_thread)
    if hasattr(_thread, "start_joinable_thread"):
        _thread.start_joinable_thread = forbid("starting a thread", _thread.start_joinable_thread)
    # threading keeps its own references to the _thread functions; a candidate can reach them too.
    for alias in ("_start_new_thread", "_start_joinable_thread"):
        if hasattr(threading, alias):
            setattr(threading, alias, forbid("starting a thread", getattr(threading, alias)))
    import subprocess

    subprocess.Popen.__init__ = forbid("starting a process", subprocess.Popen.__init__)
    builtins.open = forbid("opening a file", builtins.open)
    io.open = builtins.open
    torch.compile = forbid("torch.compile", torch.compile, always=True)
    if torch.cuda.is_available():
        stream_new = torch.cuda.Stream.__new__

        def new_stream(cls: Any, *args: Any, **kwargs: Any) -> Any:
            if not guard.allow_streams and guard.called_from_candidate():
                guard.violation("creating a CUDA stream")
            return stream_new(cls, *args, **kwargs)

        torch.cuda.Stream.__new__ = new_stream
        set_stream = torch.cuda.set_stream

        def guarded_set_stream(stream: Any) -> Any:
            # torch.cuda.stream(s) switches through set_stream; the default stream is always allowed.
            if not guard.allow_streams and guard.candidate_on_stack() and stream is not None \
                    and stream != torch.cuda.default_stream(stream.device):
                guard.violation("switching to a side CUDA stream")
            return set_stream(stream)

        torch.cuda.set_stream = guarded_set_stream

    original_import = builtins.__import__

    def guarded_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if globals is not None and globals.get("__file__") == guard.candidate_file:
            full = name
            if not _import_allowed(full):
                guard.violation(f"importing {full!r}")
                raise ImportError(f"kernelwright: importing {full!r} is not allowed in a candidate")
        return original_import(name, globals, locals, fromlist, level)

    builtins.__import__ = guarded_import

    # Reading tensor values on the host during forward. Printing reads them without dispatching any aten
    # op (so the op record would not see it): repr/format at full precision is a host compute path too.
    for attr in ("numpy", "tolist", "__array__", "__dlpack__", "__repr__", "__format__"):
        original = getattr(torch.Tensor, attr)

        def host(self: Any, *args: Any, __original: Callable = original, __attr: str = attr, **kwargs: Any) -> Any:
            if guard.forward_active and guard.called_from_candidate():
                guard.violation(f"Tensor.{__attr}() (reading tensor values on the host)")
            return __original(self, *args, **kwargs)

        setattr(torch.Tensor, attr, host)


ESCAPES = {
    "torch._C": ("_DisableTorchDispatch", "_ExcludeDispatchKeyGuard", "_IncludeDispatchKeyGuard",
                 "_ForceDispatchKeyGuard", "_PreserveDispatchKeyGuard", "_pop_torch_dispatch_stack",
                 "_unset_dispatch_mode", "_set_dispatch_mode", "_get_dispatch_stack_at", "_get_dispatch_mode",
                 "_dispatch_tls_set_dispatch_key_excluded", "_dispatch_tls_set_dispatch_key_included",
                 "_DisablePythonDispatcher", "_RestorePythonTLSSnapshot", "_dispatch_call_boxed"),
    "torch.utils._python_dispatch": ("_disable_current_modes", "_get_current_dispatch_mode",
                                     "_get_current_dispatch_mode_stack", "_pop_mode", "_pop_mode_temporarily"),
    "gc": ("get_objects", "get_referrers", "get_referents"),
    "sys": ("_current_frames", "settrace", "setprofile"),
    "threading": ("settrace", "setprofile"),
    "inspect": ("currentframe", "stack", "trace"),
}
"""Ways, from Python, to switch the op record off (leaving PyTorch's dispatch modes) or to reach the
harness's own objects and frames. Refused when the candidate's code calls them directly; PyTorch and the
standard library keep using them for their own purposes."""


def _patch_escapes(guard: Guard) -> None:
    import gc  # noqa: F401 - imported so sys.modules has every module of ESCAPES
    import inspect  # noqa: F401

    import torch.utils._python_dispatch  # noqa: F401

    def refuse(what: str, original: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if guard.called_directly_by_candidate():
                guard.violation(f"{what} (switching the op record off or reaching into the harness)")
                raise PermissionError(f"kernelwright: {what} is not allowed in a candidate")
            return original(*args, **kwargs)

        return wrapper

    for module, names in ESCAPES.items():
        mod = sys.modules[module]
        for name in names:
            original = getattr(mod, name, None)
            if original is not None:
                setattr(mod, name, refuse(f"{module}.{name}", original))

    def getframe(depth: int = 0) -> Any:
        if guard.called_directly_by_candidate():
            guard.violation("sys._getframe (walking the harness's frames)")
            raise PermissionError("kernelwright: sys._getframe is not allowed in a candidate")
        return _getframe(depth + 1)

    sys._getframe = getframe
    from torch._ops import OpOverload

    OpOverload.redispatch = refuse("OpOverload.redispatch", OpOverload.redispatch)


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
