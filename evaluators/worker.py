"""The candidate worker: a fresh process that loads exactly one candidate and runs what it is asked.

Started by `pool.py` with a scrubbed environment, a scratch working directory and a socket inherited on
a file descriptor. It never sees the problem file, the secret seed or the expected outputs: it receives
the constructor arguments, the parameters and the inputs as tensors, and sends back outputs, the state
of its inputs after each call and what the guards recorded. The trusted process decides everything.

Run as: python -m kernelwright.evaluators.worker --fd N --device cpu|cuda:K
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
import traceback
from typing import Any

_STAGES: dict[str, float] = {"module_loaded": time.time()}
_KILLPG, _GETPPID, _GETPGRP = os.killpg, os.getppid, os.getpgrp  # before any guard wraps them


def _watch_parent(parent: int) -> None:
    """Die with the trusted process, however it dies: when this process is re-parented (its parent is
    gone), kill the whole process group, this worker and anything it started. Started before the guards,
    so the candidate cannot stop it by forbidding threads; a second line besides the parent-death signal."""
    import threading

    def loop() -> None:
        while True:
            if _GETPPID() != parent:
                _KILLPG(_GETPGRP(), 9)
            time.sleep(0.25)

    threading.Thread(target=loop, name="kw-parent-watch", daemon=True).start()


def _device_setup(device: str) -> Any:
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(dev)
        torch.cuda.init()
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return dev


def _passthrough_mode() -> Any:
    from .torch_private import TorchDispatchMode

    class _Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    return _Passthrough()


def _warm_host() -> None:
    """The host-only part of the warm-up, done before the device is touched: the first use of a dispatch
    mode imports a great deal lazily (5-6 s on an H100 host), and none of it needs the GPU, so it must
    not happen while this process holds the GPU in shared use."""
    import torch

    with _passthrough_mode():
        x = torch.zeros(64)
        y = torch.empty_like(x)
        y = (torch.randn(8, 8) @ torch.randn(8, 8)).sum()
    del x, y


def _warm(dev: Any) -> None:
    """Run the library paths every candidate will use, so their lazy set-up is not charged to it."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _kw_warm(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)

    # The same path a candidate's forward takes (a dispatch mode, an allocation, a launch), so that
    # lazy imports inside PyTorch and Triton happen now rather than inside the first timed forward.
    with _passthrough_mode():
        x = torch.zeros(64, device=dev)
        y = torch.empty_like(x)
        _kw_warm[(1,)](x, 64, BLOCK=64)
        y = (torch.randn(64, 64, device=dev) @ torch.randn(64, 64, device=dev)).sum()
    if dev.type == "cuda":
        from .timing import flush_l2

        flush_l2(torch.ones(64, device=dev))  # the timing's L2 flush, compiled now (and kept in the base cache)
        torch.cuda.synchronize(dev)
    del x, y


PROGRAM_ORDERS = ("forward", "reverse")
"""the orders Triton's interpreter may run a launch's programs in, one at a time (`_set_program_order`)"""


def _set_program_order(order: str) -> None:
    """Run every launch's programs one at a time in `order` (Triton's interpreter runs them in program-id order,
    each to its end before the next starts): "reverse" gives the last program id first. A kernel whose programs
    wait on a program that has not started then never finishes, whatever order its author relied on; one that
    waits only on work items claimed earlier through a ticket finishes in both orders (the ordering check,
    `Evaluator._ordering_check`). Set before the candidate is imported; it cannot reach the builder through
    the imports the static check allows."""
    if order not in PROGRAM_ORDERS:
        raise ValueError(f"unknown program order {order!r}")
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    own = type(builder).set_grid_idx
    if order == "forward":
        builder.__dict__.pop("set_grid_idx", None)
        return

    def set_grid_idx(x: int, y: int, z: int) -> None:
        nx, ny, nz = builder.grid_dim
        own(builder, nx - 1 - x, ny - 1 - y, nz - 1 - z)

    builder.set_grid_idx = set_grid_idx


def _interpreter_index_compat() -> None:
    """Triton 3.6's interpreter turns a scalar into an index with `int(data)` of its one-element array, which NumPy 2
    refuses ("only 0-dimensional arrays can be converted to Python scalars"): `for p in range(0, N, BLOCK)` with N a
    runtime argument failed in the interpreter for every kernel, and the ordering check refused a model's GroupNorm
    that is valid on the GPU (issue 23, an H100 run with Triton 3.6). Triton 3.9 squeezes the array first; the same
    is done here, before the candidate is imported, wherever the interpreter runs it. Idempotent; a Triton without the
    hook is left as it is."""
    from triton.runtime import interpreter

    own = getattr(interpreter, "_patch_lang_tensor", None)
    if own is None or getattr(own, "kw_index_compat", False):
        return

    def patch_lang_tensor(tensor: Any, scope: Any) -> None:
        own(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patch_lang_tensor.kw_index_compat = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patch_lang_tensor


def _thread_count() -> int:
    """Threads alive besides the main one, however they were started (threading or raw _thread)."""
    import _thread

    return _thread._count()


def _error_kind(e: BaseException) -> str:
    import torch

    try:
        text = f"{type(e).__name__}: {e}"
    except Exception:  # noqa: BLE001 - a candidate's exception whose message cannot be read
        return "exception"
    if isinstance(e, (MemoryError, torch.OutOfMemoryError)) or "out of memory" in text.lower() or \
            "can't allocate memory" in text.lower():
        return "out_of_memory"
    if "CUDA error" in text or "cudaError" in text or "illegal memory access" in text.lower() \
            or "CUDA_ERROR" in text or "device-side assert" in text:
        return "cuda_error"
    return "exception"


def _chain(e: BaseException, depth: int = 8) -> list[BaseException]:
    """`e` and the exceptions it was raised from (`raise ... from`), outermost first; bounded and cycle-safe, since
    a candidate's exception objects are its own. Not the implicit context: an exception handled earlier, elsewhere,
    would name a line that has nothing to do with this error."""
    chain: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and len(chain) < depth and all(cur is not c for c in chain):
        chain.append(cur)
        cur = cur.__cause__
    return chain


def _is_interpreter_error(e: BaseException) -> bool:
    """Triton's interpreter wrapper, known by name and package (its module moved between Triton releases)."""
    return type(e).__name__ == "InterpreterError" and str(type(e).__module__).split(".")[0] == "triton"


def _interpreter_root(chain: list[BaseException]) -> BaseException | None:
    """The error Triton's interpreter wrapped, when the outermost exception is its wrapper: it raises
    `InterpreterError(repr(error)) from error` at each jit function's boundary (the launch, and each call of a
    @triton.jit helper), so a helper's error reached the model as a repr of a repr."""
    if not _is_interpreter_error(chain[0]):
        return None
    return next((c for c in chain if not _is_interpreter_error(c)), None)


def _safe_name(e: BaseException) -> str:
    try:
        return str(type(e).__name__)[:100]
    except Exception:  # noqa: BLE001 - a candidate's class may be anything
        return "an exception"


def _describe(e: BaseException, candidate_file: str, limit: int = 4000) -> str:
    """`_described`, or the exception's class name alone where the candidate's exception cannot even be
    described (a `__str__` that raises, a class whose module is not a string): the reply must still go."""
    try:
        return _described(e, candidate_file, limit)
    except Exception:  # noqa: BLE001 - the candidate's objects, not ours
        return f"{_safe_name(e)}: (its message could not be read)"


def _described(e: BaseException, candidate_file: str, limit: int = 4000) -> str:
    """The exception and the candidate's own frames (the harness's frames say nothing useful). An error inside a
    kernel run by Triton's interpreter is raised again at the launch, and again at each call of a @triton.jit
    helper, each time with the inner frames left on its cause: the whole chain is walked, so the message names the
    line of the kernel or helper where it happened, not only the launch's (a model shown only the launch line, then
    only the line calling a helper, could not tell which statement the interpreter refused). Only frames of the
    candidate's own file are shown; the interpreter's wrapper is unwrapped to the error it carries."""
    chain = _chain(e)
    # outermost first: an exception's traceback runs from where it was caught to where it was raised, and its cause's
    # from there inward (the forward's launch, then the kernel's line calling a helper, then the helper's)
    frames = [f for c in chain if c.__traceback__ is not None
              for f in traceback.extract_tb(c.__traceback__) if f.filename == candidate_file]
    lines = [f'  candidate line {f.lineno}, in {f.name}: {f.line or ""}' for f in frames[-6:]]
    root = _interpreter_root(chain)
    message = f"{type(e).__name__}: {type(root).__name__}: {root}" if root is not None else f"{type(e).__name__}: {e}"
    head = "\n".join(lines)
    room = max(limit - len(head) - 1, limit // 4)  # a long message is cut, not the lines naming where it happened
    text = "\n".join([*lines, message[:room]])
    return text[-limit:]


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class Session:
    def __init__(self, sock: socket.socket, device: str, scratch: str, profiled: bool = False,
                 allow_unconfined: bool = False, gpu_lock: tuple[str, str] | None = None,
                 wait_go: bool = False) -> None:
        from . import guards, sandbox, torch_private, wire
        from .locks import shared_use

        import torch
        import triton  # noqa: F401 - imported here, where nothing waits on it
        import triton.language  # noqa: F401

        self.torch = torch
        self.wire = wire
        self.sock = sock
        _warm_host()
        _STAGES["imports_done"] = time.time()
        if wait_go:  # a spare: imported, but its context waits until the pool says so (pool.Worker.go)
            header, _ = wire.recv(sock)
            if header.get("op") != "go":
                raise RuntimeError(f"expected 'go' before start-up, got {header.get('op')!r}")
            _STAGES["go"] = time.time()
        # Creating a CUDA context and warming up use the GPU: never while another process is timing.
        with shared_use(torch.device(device), gpu_lock) if gpu_lock else _nothing():
            self.dev = _device_setup(device)
            _STAGES["device_ready"] = time.time()
            _warm(self.dev)
        _STAGES["warm_done"] = time.time()
        # The kernel-enforced line: from here on this process (and anything it starts) writes only to the
        # scratch directory and cannot read other processes' environments or other workers' scratch. Under a
        # profiler too. Where it cannot apply, no candidate is loaded here unless the trusted side said so.
        confined = sandbox.confine(scratch, device, profiled=profiled)
        self.sandbox = confined.detail
        self.refused: str | None = None
        if not confined.confined:
            if allow_unconfined:
                self.sandbox += f"; not confined as required ({confined.missing}): run all the same, as the user allowed"
            else:
                self.refused = sandbox.refusal(confined.missing or "unknown")
        self.candidate_file = os.path.join(scratch, "kw_candidate.py")
        self.guard = guards.Guard(self.candidate_file, self.dev)
        guards.install(self.guard)
        # Bound now, so a candidate that replaces Guard.take or Guard.tampered on the class changes
        # nothing the harness calls (and the replacement itself shows up as tampering).
        self._take = self.guard.take
        self._tampered = self.guard.tampered
        self.recorder_cls = guards.OpRecorder
        # Everything the harness calls from here on, captured before the candidate can replace it.
        self._sync = torch.cuda.synchronize if self.dev.type == "cuda" else (lambda *a: None)
        if self.dev.type == "cuda":  # the timing primitives, as they were before any candidate ran
            self._record = torch.cuda.Event.record
            self._elapsed = torch.cuda.Event.elapsed_time
            self._spin = torch_private.cuda_sleep
        else:
            self._record = self._elapsed = self._spin = None
        self._perf = time.perf_counter
        self._send = wire.send
        self._recv = wire.recv
        self.ipc = None
        if self.dev.type == "cuda":
            try:  # bound before the candidate loads; buffers are shared with the trusted process from here
                from . import ipc

                ipc.driver()
                self.ipc = ipc
            except Exception as e:  # noqa: BLE001 - the trusted side falls back to the socket
                self.ipc_error = f"{type(e).__name__}: {e}"
        self.prepoison = None
        if self.dev.type == "cuda":
            from .ipc import tensor_at
            from .poison import Prepoison

            self.prepoison = Prepoison(self.dev, tensor_at)
            self.guard.prepoison = self.prepoison
        self.guard.snapshot()
        self.model: Any = None
        self.timed: dict[str, Any] | None = None  # the timing in progress: its sets, repetition, last output
        self.buffers: list[Any] | None = None
        self.shared_sets: list[list[Any]] = []  # [set][input] -> ipc.Exported or None (not a tensor)
        self.held: list[list[Any]] = []
        self.held_bytes = 0
        self.exports: list[Any] = []  # outputs of the last call, exported, until the next call
        self.threads0 = 0

    # -- protocol -------------------------------------------------------------------------------------

    def reply(self, header: dict[str, Any], payload: Any = None) -> None:
        if self.dev.type == "cuda":
            try:
                raw = sum(b.tensor.numel() * b.tensor.element_size() for bs in self.shared_sets for b in bs
                          if b is not None and b.tensor is not None)
                raw += sum(e.tensor.numel() * e.tensor.element_size() for e in self.exports
                           if e.raw_ptr is not None and e.tensor is not None)
                self._raw_peak = max(getattr(self, "_raw_peak", 0), raw)
                header = {**header, "device_peak": int(self.torch.cuda.max_memory_allocated(self.dev)) + self._raw_peak}
            except Exception:  # noqa: BLE001 - a broken context: the reply still goes
                pass
        self._send(self.sock, header, payload)

    def serve(self) -> None:
        import triton

        _STAGES["ready"] = time.time()
        t0 = _STAGES.get("spawned", _STAGES["module_loaded"])
        stages = {k: round(v - t0, 4) for k, v in _STAGES.items()}
        self.reply({"op": "ready", "pid": os.getpid(), "stages": stages, "sandbox": self.sandbox,
                    "refused": self.refused,
                    "ipc": self.ipc is not None, "ipc_error": getattr(self, "ipc_error", None),
                    "versions": {"torch": self.torch.__version__, "triton": triton.__version__,
                                 "python": sys.version.split()[0]}})
        while True:
            header, payload = self._recv(self.sock)
            op = header.get("op")
            if op == "exit":
                return
            if self.refused is not None:  # unconfined and not allowed: no candidate, whatever is asked
                self.reply({"ok": False, "kind": "unconfined", "detail": self.refused})
                continue
            handler = {"load": self.load, "call": self.call, "recheck": self.recheck,
                       "time_begin": self.time_begin, "time_rep": self.time_rep, "time_output": self.time_output,
                       "time_end": self.time_end, "profile": self.profile, "buffers": self.share_buffers,
                       "release": self.release}.get(op)
            if handler is None:
                self.reply({"ok": False, "kind": "protocol", "detail": f"unknown op {op!r}"})
                continue
            handler(header, payload)

    def _fail(self, kind: str, detail: str, **extra: Any) -> None:
        self.reply({"ok": False, "kind": kind, "detail": detail, **extra, **self._take(),
                    "tampered": self._tampered()})

    # -- phases ---------------------------------------------------------------------------------------

    def load(self, header: dict[str, Any], payload: Any) -> None:
        import importlib.util

        torch = self.torch
        source, init_args, state = payload["source"], payload["init_args"], payload["state"]
        cast = payload.get("cast_dtype")
        self.guard.allow_streams = bool(payload.get("allow_streams"))
        order = payload.get("program_order")
        if self.dev.type == "cpu":
            _interpreter_index_compat()
        if order is not None:
            if self.dev.type != "cpu":
                return self._fail("program_order", "a program order can be set only in Triton's interpreter (cpu)")
            _set_program_order(str(order))
        with open(self.candidate_file, "w") as f:
            f.write(source)
        self.threads0 = _thread_count()
        t0 = self._perf()
        try:
            spec = importlib.util.spec_from_file_location("kw_candidate", self.candidate_file)
            module = importlib.util.module_from_spec(spec)
            sys.modules["kw_candidate"] = module
            spec.loader.exec_module(module)
        except BaseException as e:  # noqa: BLE001 - a candidate may raise anything, SystemExit included
            return self._fail("import", _describe(e, self.candidate_file))
        import_s = self._perf() - t0
        cls = getattr(module, "ModelNew", None)
        if not isinstance(cls, type) or not issubclass(cls, torch.nn.Module):
            return self._fail("missing_model_new", "the candidate defines no class ModelNew(nn.Module)")
        try:
            with torch.no_grad():
                model = cls(*init_args)
                model = model.to(device=self.dev, dtype=cast) if cast is not None else model.to(self.dev)
        except BaseException as e:  # noqa: BLE001
            return self._fail(_error_kind(e) if _error_kind(e) != "exception" else "init",
                              _describe(e, self.candidate_file))
        try:
            with torch.no_grad():
                result = model.load_state_dict(state, strict=True)
        except BaseException as e:  # noqa: BLE001
            return self._fail("parameters", f"the reference's parameters do not load into ModelNew: {str(e)[:1500]}")
        del result
        self.model = model
        tampered = self._tampered()
        self.reply({"ok": True, "import_s": import_s, **self._take(), "tampered": tampered,
                    "threads": _thread_count() - self.threads0})

    def _place_inputs(self, inputs: list[Any], layouts: list[Any], reuse: bool) -> list[Any]:
        torch = self.torch
        placed = []
        same = reuse and self.buffers is not None and len(self.buffers) == len(inputs)
        for i, (x, layout) in enumerate(zip(inputs, layouts)):
            if not isinstance(x, torch.Tensor):
                placed.append(x)
                continue
            if same and isinstance(self.buffers[i], torch.Tensor) and list(self.buffers[i].shape) == list(x.shape) \
                    and self.buffers[i].dtype == x.dtype:
                buf = self.buffers[i]
            else:
                try:
                    buf = torch.empty_strided(layout["shape"], layout["stride"], dtype=x.dtype, device=self.dev)
                    buf.copy_(x.to(self.dev))
                    placed.append(buf)
                    continue
                except RuntimeError:
                    buf = torch.empty(x.shape, dtype=x.dtype, device=self.dev)
            buf.copy_(x.to(self.dev))
            placed.append(buf)
        self.buffers = placed
        return placed

    # -- device buffers shared with the trusted process (CUDA) ------------------------------------------

    def share_buffers(self, header: dict[str, Any], payload: Any) -> None:
        """Allocate raw device buffers for input sets and export them; the trusted process fills them.

        `sets` is a list of input sets, each a list of {shape, stride, dtype} (or None for a non-tensor
        argument). With `reuse`, buffers of the same layouts are kept (the trusted side refills them)."""
        from .wire import dtype_from_name

        ipc = self.ipc
        if ipc is None:
            return self.reply({"ok": False, "kind": "protocol", "detail": "no CUDA IPC in this worker"})
        specs = header.get("sets") or []
        same = bool(header.get("reuse")) and self.shared_sets and self._shared_specs() == specs
        if not same:
            self._free_shared()
            try:
                for spec_set in specs:
                    self.shared_sets.append([
                        ipc.allocate(list(sp["shape"]), list(sp["stride"]), dtype_from_name(sp["dtype"]), self.dev)
                        if sp else None for sp in spec_set])
            except Exception as e:  # noqa: BLE001 - out of device memory, mostly
                self._free_shared()
                return self._fail(_error_kind(e) if _error_kind(e) != "exception" else "out_of_memory",
                                  f"allocating the input buffers failed: {e}")
        self.reply({"ok": True, "buffers": [[b.describe() if b else None for b in bs] for bs in self.shared_sets]})

    def _shared_specs(self) -> list[list[Any]]:
        return [[{"shape": list(b.tensor.shape), "stride": list(b.tensor.stride()),
                  "dtype": str(b.tensor.dtype).removeprefix("torch.")} if b else None for b in bs]
                for bs in self.shared_sets]

    def _free_shared(self) -> None:
        sets, self.shared_sets = self.shared_sets, []
        self.buffers = None
        for bs in sets:
            for b in bs:
                if b is not None:
                    try:
                        b.free()
                    except Exception:  # noqa: BLE001 - a buffer the candidate broke: nothing more to do
                        pass

    def _shared_inputs(self, k: int, values: list[Any]) -> list[Any]:
        bufs = self.shared_sets[k]
        return [b.tensor if b is not None else v for b, v in zip(bufs, values)]

    def _export(self, outs: list[Any]) -> list[dict[str, Any]]:
        """Export each output for the trusted process to read: the allocation it lives in, or (when that
        cannot be exported) a raw copy of it."""
        ipc = self.ipc
        descs = []
        for o in outs:
            try:
                e = ipc.export(o)
            except Exception:  # noqa: BLE001 - e.g. an allocator setting that maps memory differently
                e = ipc.allocate(list(o.shape), list(o.stride()), o.dtype, self.dev)
                e.tensor.copy_(o)
                self._sync()
            self.exports.append(e)
            descs.append(e.describe())
        return descs

    def _drop_exports(self) -> None:
        exports, self.exports = self.exports, []
        for e in exports:
            if e.raw_ptr is not None and not any(e.tensor is h for hs in self.held for h in hs):
                try:
                    e.free()
                except Exception:  # noqa: BLE001
                    pass

    def release(self, header: dict[str, Any], payload: Any) -> None:
        """The judge is done with the last call's outputs: drop them (unless held) and give the memory
        back to the device, so the trusted process can use it for the next reference."""
        self._drop_exports()
        if header.get("buffers"):
            self._free_shared()
        if self.dev.type == "cuda":
            self._sync()
            self.torch.cuda.empty_cache()
        self.reply({"ok": True, "tampered": self._tampered()})

    def call(self, header: dict[str, Any], payload: Any) -> None:

        torch = self.torch
        guard = self.guard
        shared = bool(header.get("shared"))
        if shared:
            self._drop_exports()
            inputs = self._shared_inputs(0, payload["inputs"])
        else:
            inputs = self._place_inputs(payload["inputs"], header["layouts"], bool(header.get("reuse")))
        self._sync()
        self._take()
        profile = bool(header.get("profile")) and self.dev.type == "cuda"
        prof = None
        guard.poison = bool(header.get("poison", True))
        self._lay_poison(guard.poison)
        t0 = self._perf()
        try:
            with torch.no_grad():
                if profile:
                    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
                    prof.__enter__()
                guard.forward_active = True
                with self.recorder_cls(guard):
                    out = self.model(*inputs)
                guard.forward_active = False
                self._sync()
                if prof is not None:
                    prof.__exit__(None, None, None)
        except BaseException as e:  # noqa: BLE001
            guard.forward_active = False
            return self._fail(_error_kind(e), _describe(e, self.candidate_file))
        forward_s = self._perf() - t0
        guard.poison = False
        rec = self._take()
        tampered = self._tampered()
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        metas = []
        for o in outs:
            if type(o) is not torch.Tensor:  # noqa: E721 - subclasses (lazy tensors) are rejected on purpose
                metas.append({"type": f"{type(o).__module__}.{type(o).__qualname__}"})
                continue
            metas.append({"type": "torch.Tensor", "device": str(o.device), "dtype": str(o.dtype).removeprefix("torch."),
                          "shape": list(o.shape), "stride": list(o.stride()),
                          "aliases": self._aliases(o, inputs)})
        plain = [o for o in outs if type(o) is torch.Tensor]  # noqa: E721
        kernel_time = self._kernel_times(prof, rec) if prof is not None else None
        header_out = {"ok": True, "forward_s": forward_s, **rec, "tampered": tampered, "outputs": metas,
                      "threads": _thread_count() - self.threads0, "kernel_time": kernel_time}
        if len(plain) != len(outs):
            return self.reply(header_out, {"outputs": [], "inputs_after": []})
        if shared:
            if header.get("hold"):
                self.held.append(plain)
            try:
                header_out["exports"] = self._export(plain)
            except Exception as e:  # noqa: BLE001
                return self._fail(_error_kind(e) if _error_kind(e) != "exception" else "out_of_memory",
                                  f"the outputs could not be shared with the judge: {e}")
            return self.reply(header_out)
        self._hold(plain)
        after = [x for x in inputs if isinstance(x, torch.Tensor)]
        self.reply(header_out, {"outputs": plain, "inputs_after": after})

    def _aliases(self, o: Any, inputs: list[Any]) -> list[str]:
        torch = self.torch
        found = []

        def span(t: Any) -> tuple[int, int]:
            s = t.untyped_storage()
            return s.data_ptr(), s.data_ptr() + s.nbytes()

        if o.numel() == 0:
            return found
        lo, hi = span(o)

        def overlaps(t: Any) -> bool:
            a, b = span(t)
            return a < hi and lo < b

        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and x.numel() and overlaps(x):
                found.append(f"input {i}")
        for name, p in list(self.model.named_parameters()) + list(self.model.named_buffers()):
            if p.numel() and overlaps(p):
                found.append(f"parameter {name}")
        for k, held in enumerate(self.held):
            if any(h.numel() and overlaps(h) for h in held):
                found.append(f"the output of an earlier call ({k})")
                break
        return found

    def _hold(self, outs: list[Any]) -> None:
        """Keep outputs alive, so a later call cannot reuse their memory and they can be re-read later."""
        size = sum(o.numel() * o.element_size() for o in outs)
        if self.held_bytes + size <= (2 << 30) or not self.held:
            self.held.append(outs)
            self.held_bytes += size

    def _kernel_times(self, prof: Any, rec: dict[str, Any]) -> dict[str, float]:
        own = set(rec["launches"])
        own_us = other_us = copy_us = 0.0
        for evt in prof.events():
            dev_type = getattr(evt, "device_type", None)
            if dev_type is None or "CUDA" not in str(dev_type):
                continue
            us = float(evt.time_range.elapsed_us())
            name = evt.name or ""
            if any(name.startswith(k) for k in own):
                own_us += us
            elif "memcpy" in name.lower() or "memset" in name.lower() or "copy" in name.lower() or "fill" in name.lower():
                copy_us += us
            else:
                other_us += us
        return {"own_us": own_us, "other_us": other_us, "copy_us": copy_us}

    def _lay_poison(self, on: bool) -> None:
        """Poison the free device memory before a call (`poison.py`), checked or timed alike; outside any
        timed region. With poisoning off (a profile), forget the last call's ranges."""
        if self.prepoison is None:
            return
        if not on:
            self.prepoison.clear()
            return
        self._sync()
        self.prepoison.lay()
        self._sync()

    # -- timing: one repetition per request, so the judge picks the ones it checks after they ran ------

    def time_begin(self, header: dict[str, Any], payload: Any) -> None:
        """Place the timing input sets and warm up. Every repetition then runs exactly as a correctness call
        does (the recorder on, free memory poisoned first), one per `time_rep` request; after each, the judge
        may ask for its output (`time_output`) — a choice made after the repetition ran, so a candidate cannot
        know which of its timed calls are checked (docs/verifier.md item 30)."""
        from .timing import Repetition, flush_buffer

        torch = self.torch
        guard = self.guard
        self.timed = None
        guard.measure_bytes = False  # until time_end: no bookkeeping between the timed launches
        shared = bool(header.get("shared"))
        sets = []
        if shared:
            self._drop_exports()
            self.held = []
            sets = [self._shared_inputs(k, values) for k, values in enumerate(payload["sets"])]
        else:
            self.held = []
            for inputs in payload["sets"]:
                self.buffers = None
                sets.append(self._place_inputs(inputs, header["layouts"], False))
        self._take()
        try:
            with torch.cuda.device(self.dev):
                rep = Repetition(self.dev, flush=flush_buffer(self.dev), sync=self._sync, clock=self._perf,
                                 record=self._record, elapsed=self._elapsed, spin=self._spin)
            with torch.no_grad():
                for w in range(int(header.get("warmup", 3))):
                    self._lay_poison(True)
                    guard.poison = True
                    out = self._forward(sets[w % len(sets)])
                    guard.poison = False
                    self._sync()
                    del out
        except BaseException as e:  # noqa: BLE001
            guard.forward_active = False
            guard.poison = False
            return self._fail(_error_kind(e), _describe(e, self.candidate_file))
        self.timed = {"sets": sets, "rep": rep, "last": None, "shared": shared}
        self.reply({"ok": True, **self._take(), "tampered": self._tampered(),
                    "threads": _thread_count() - self.threads0})

    def _forward(self, inputs: list[Any]) -> Any:
        guard = self.guard
        guard.forward_active = True
        try:
            with self.recorder_cls(guard):
                return self.model(*inputs)
        finally:
            guard.forward_active = False

    def _drop_timed(self) -> None:
        if self.timed is not None:
            self.timed["last"] = None
            if self.timed["shared"]:
                self._drop_exports()

    def time_rep(self, header: dict[str, Any], payload: Any) -> None:
        """One timed repetition on input set `set` (`timing.Repetition`, the baselines' routine). The last
        repetition's output is dropped first; this one's is kept until the next request."""
        from .timing import Samples

        torch = self.torch
        guard = self.guard
        if self.timed is None:
            return self.reply({"ok": False, "kind": "protocol", "detail": "time_rep before time_begin"})
        self._drop_timed()
        sets = self.timed["sets"]
        i = int(header.get("set", 0)) % len(sets)
        samples = Samples()
        self._take()
        try:
            with torch.no_grad(), torch.cuda.device(self.dev):
                self._lay_poison(True)
                guard.poison = True
                out = self.timed["rep"](lambda k: self._forward(sets[k]), i, samples)
                guard.poison = False
        except BaseException as e:  # noqa: BLE001
            guard.forward_active = False
            guard.poison = False
            return self._fail(_error_kind(e), _describe(e, self.candidate_file))
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        del out
        bad = sum(type(o) is not torch.Tensor for o in outs)  # noqa: E721
        self.timed["last"] = outs
        self.reply({"ok": True, **self._take(), "tampered": self._tampered(),
                    "threads": _thread_count() - self.threads0, "event_ms": samples.event_ms[0],
                    "wall_ms": samples.wall_ms[0], "outer_ms": samples.outer_ms[0], "pre_ms": samples.pre_ms[0],
                    "outputs": len(outs), "bad_outputs": bad})

    def time_output(self, header: dict[str, Any], payload: Any) -> None:
        """The last repetition's outputs, for the judge to check: exported (shared) or sent (wire)."""
        if self.timed is None or self.timed["last"] is None:
            return self.reply({"ok": False, "kind": "protocol", "detail": "no timed output to send"})
        outs = self.timed["last"]
        if any(type(o) is not self.torch.Tensor for o in outs):  # noqa: E721
            return self.reply({"ok": False, "kind": "protocol", "detail": "the outputs are not plain tensors"})
        self._sync()
        if self.timed["shared"]:
            try:
                descs = self._export(outs)
            except Exception as e:  # noqa: BLE001
                return self._fail("out_of_memory", f"the timed outputs could not be shared with the judge: {e}")
            return self.reply({"ok": True, "exports": descs, "tampered": self._tampered()})
        self.reply({"ok": True, "tampered": self._tampered()}, {"outputs": outs})

    def time_end(self, header: dict[str, Any], payload: Any) -> None:
        """The timing is over: drop the last output and give the memory back for the judge's baselines."""
        self._drop_timed()
        self.timed = None
        self.guard.measure_bytes = True
        if self.prepoison is not None:
            self.prepoison.clear()
        self._sync()
        self.torch.cuda.empty_cache()
        self.reply({"ok": True, **self._take(), "tampered": self._tampered(),
                    "threads": _thread_count() - self.threads0})

    def profile(self, header: dict[str, Any], payload: Any) -> None:
        """Run the forward a few times under torch.profiler; report device time per kernel."""
        torch = self.torch
        guard = self.guard
        inputs = self._place_inputs(payload["inputs"], header["layouts"], False)
        self._take()
        events: list[tuple[str, float]] = []
        try:
            with torch.no_grad():
                self.model(*inputs)  # compile and warm outside the profile
                self._sync()
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    guard.forward_active = True
                    with self.recorder_cls(guard):
                        for _ in range(int(header.get("iterations", 3))):
                            self.model(*inputs)
                    guard.forward_active = False
                    self._sync()
            for evt in prof.events():
                if "CUDA" in str(getattr(evt, "device_type", "")):
                    events.append((evt.name or "?", float(evt.time_range.elapsed_us())))
        except BaseException as e:  # noqa: BLE001
            guard.forward_active = False
            return self._fail(_error_kind(e), _describe(e, self.candidate_file))
        self.reply({"ok": True, **self._take(), "tampered": self._tampered(), "events": events[:5000]})

    def recheck(self, header: dict[str, Any], payload: Any) -> None:
        self._sync()
        if header.get("shared"):  # the trusted side re-reads the held outputs through its own mappings
            return self.reply({"ok": True, "counts": [len(o) for o in self.held], "tampered": self._tampered()})
        flat = [t for outs in self.held for t in outs]
        self.reply({"ok": True, "counts": [len(o) for o in self.held], "tampered": self._tampered()},
                   {"outputs": flat})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kernelwright-worker")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--spawned", type=float, default=None, help="wall time the parent spawned us")
    ap.add_argument("--parent", type=int, default=None, help="the trusted process's pid (die when it dies)")
    ap.add_argument("--profiled", action="store_true", help="runs under a profiler wrapper (ncu): confined all the "
                    "same, its injected libraries readable")
    ap.add_argument("--allow-unconfined", action="store_true",
                    help="load candidate code even where the sandbox cannot confine it (the trusted side's opt-out)")
    ap.add_argument("--gpu-lock", nargs=2, default=None, metavar=("LOCK", "GATE"),
                    help="the parent's GPU lock files (shared use during start-up)")
    ap.add_argument("--wait-go", action="store_true", help="create the device context only when told to")
    args = ap.parse_args(argv)
    if args.spawned:
        _STAGES["spawned"] = args.spawned
    parent = args.parent if args.parent is not None else os.getppid()
    if os.getppid() != parent:  # the trusted process died before we got here
        return 4
    _watch_parent(parent)
    sock = socket.socket(fileno=args.fd)
    scratch = os.getcwd()
    try:
        Session(sock, args.device, scratch, profiled=args.profiled, allow_unconfined=args.allow_unconfined,
                gpu_lock=tuple(args.gpu_lock) if args.gpu_lock else None, wait_go=args.wait_go).serve()
    except Exception:  # the channel broke or set-up failed: the trusted side sees EOF and says so
        traceback.print_exc()
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
