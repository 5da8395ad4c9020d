"""Candidate worker processes, seen from the trusted side: start, talk, watch, kill.

Each candidate gets a process no other candidate touched: started with an allow-listed environment (no
API keys or tokens), a fresh scratch directory as its working directory and home, its own Triton cache,
its own process group (so everything it spawns dies with it), no core dumps and a cap on file sizes.
A watchdog enforces a resident-memory limit. Spare workers are started ahead of need so the cost of
importing torch and creating a CUDA context is off the critical path.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch

from . import wire
from .device import resolve_device
from .locks import lock_paths
from .result import Reason

log = logging.getLogger(__name__)

_PASS_ENV = re.compile(
    r"^(PATH|LANG|LANGUAGE|LC_[A-Z]+|TZ|PYTHONPATH|LD_LIBRARY_PATH|CUDA_HOME|CUDA_PATH|CUDA_VISIBLE_DEVICES|"
    r"CUDA_DEVICE_ORDER|NVIDIA_VISIBLE_DEVICES|NVIDIA_DRIVER_CAPABILITIES|CC|CXX|OMP_NUM_THREADS|"
    r"MKL_NUM_THREADS|OPENBLAS_[A-Z_]+|NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS|"
    r"TRITON_(PTXAS_PATH|CUOBJDUMP_PATH|NVDISASM_PATH|LIBCUDA_PATH|CUDACRT_PATH|CUDART_PATH|INTERPRET))$"
)
SECRETISH = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)
LOG_LIMIT = 8000


def scrubbed_env(scratch: str, device: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The only environment a candidate process gets: an allow-list, never anything secret-looking."""
    src = os.environ if base is None else base
    env = {k: v for k, v in src.items() if _PASS_ENV.match(k) and not SECRETISH.search(k)}
    env.update({
        "HOME": scratch, "TMPDIR": scratch, "TRITON_CACHE_DIR": os.path.join(scratch, "triton-cache"),
        "TRITON_HOME": scratch, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
        "PYTHONNOUSERSITE": "1", "CUDA_MODULE_LOADING": "LAZY",
    })
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


@dataclass
class WorkerFault(Exception):
    """The worker stopped being a worker: it hung, died or broke the protocol. Carries the verdict."""

    reason: Reason
    detail: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


@dataclass
class Limits:
    """Per-phase wall-clock limits (seconds) and the host-memory limit of one candidate process.

    Compilation and execution are limited separately. A phase that may compile (the import, the first
    forward, a profile) gets its execution limit plus a compile allowance: the deadline moves on while
    the worker's Triton cache keeps growing (a kernel is being compiled), until nothing new has appeared
    for `compile_quiet_s`, and never past `compile_cap_s`. Execution limits left at None are scaled from
    the reference forward's own measured time (`scaled`), with a floor, so a hang on a small problem is
    judged in seconds and a large problem is never cut short."""

    startup_s: float = 120.0
    load_s: float = 30.0
    first_call_s: float | None = None
    """the first forward's execution limit (before its compile allowance); None: the scaled call limit"""
    call_s: float | None = None
    """every later forward; None: `call_floor_s` or `call_factor` times the reference forward, the larger"""
    timing_s: float | None = None
    """the whole timing request; None: scaled from the repetitions and the reference forward"""
    memory_bytes: int = 16 << 30
    compile_quiet_s: float = 20.0
    compile_cap_s: float = 600.0
    call_floor_s: float = 10.0
    call_factor: float = 50.0
    cpu_call_floor_s: float = 30.0
    cpu_call_factor: float = 1000.0
    """Triton's interpreter runs a kernel orders of magnitude slower than PyTorch runs the reference"""

    def scaled(self, ref_forward_s: float | None, device_type: str, reps: int = 0) -> dict[str, float]:
        """The execution limits for a problem whose reference forward takes `ref_forward_s` seconds."""
        ref = max(ref_forward_s or 0.0, 0.0)
        floor, factor = (self.cpu_call_floor_s, self.cpu_call_factor) if device_type == "cpu" \
            else (self.call_floor_s, self.call_factor)
        call = self.call_s if self.call_s is not None else max(floor, factor * ref)
        first = self.first_call_s if self.first_call_s is not None else call
        timing = self.timing_s if self.timing_s is not None else max(60.0, call + reps * (20 * ref + 0.02))
        return {"load_s": self.load_s, "first_call_s": first, "call_s": call, "timing_s": timing}


class _Expired(Exception):
    """The phase's deadline passed with no compilation going on."""


def _latest_mtime(path: str) -> float:
    latest = 0.0
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    latest = max(latest, st.st_mtime)
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
        except OSError:
            continue
    return latest


class _Spawner:
    """Starts every worker from one long-lived thread. A worker asks the kernel for SIGKILL when its
    parent dies (PR_SET_PDEATHSIG), and the kernel means the thread that forked it: forking from a
    thread that lives as long as the process ties the worker to the process, not to whichever short-lived
    thread happened to ask for a spare."""

    def __init__(self) -> None:
        import queue

        self._q: queue.Queue[Any] = queue.Queue()
        threading.Thread(target=self._loop, name="kw-spawner", daemon=True).start()

    def _loop(self) -> None:
        while True:
            args, kwargs, box, done = self._q.get()
            try:
                box.append(subprocess.Popen(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                box.append(e)
            done.set()

    def popen(self, *args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        box: list[Any] = []
        done = threading.Event()
        self._q.put((args, kwargs, box, done))
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]


_SPAWNER: _Spawner | None = None
_SPAWNER_LOCK = threading.Lock()


def _spawner() -> _Spawner:
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = _Spawner()
        return _SPAWNER


class Worker:
    """One candidate process. Single-use: after `close()` (or any fault) it is gone."""

    def __init__(self, device: str, limits: Limits, wrapper: list[str] | None = None,
                 base_cache: str | None = None, on_ready: Any = None, deferred: bool = False) -> None:
        """With `deferred`, the process starts and imports at once but creates its CUDA context (which holds
        the GPU in shared use) only when told to (`go()`, or the first request): a spare started while an
        evaluation is running then never delays that evaluation's measurement."""
        self.device = device
        self.limits = limits
        self.on_ready = on_ready
        self.scratch = tempfile.mkdtemp(prefix="kw-worker-")
        self.cache_dir = os.path.join(self.scratch, "triton-cache")
        if base_cache and os.path.isdir(base_cache):
            # A copy of what a pristine worker compiled at start-up (Triton's driver utilities, launchers):
            # trusted content, and this worker's own copy, so nothing it writes reaches another candidate.
            shutil.copytree(base_cache, self.cache_dir)
        os.makedirs(self.cache_dir, exist_ok=True)
        parent, child = socket.socketpair()
        self.sock = parent
        self.log_path = os.path.join(self.scratch, "worker.log")
        self._log = open(self.log_path, "wb")
        self.started = time.monotonic()
        self.startup_s: float | None = None
        self.info: dict[str, Any] = {}
        self.proc = _spawner().popen(
            [*(wrapper or []), sys.executable, "-s", "-m", "kernelwright.evaluators.worker", "--fd", str(child.fileno()),
             "--device", device, "--spawned", repr(time.time()),
             *(["--no-sandbox"] if wrapper else ["--parent", str(os.getpid())]),
             *(["--gpu-lock", *lock_paths(torch.device(device))] if device.startswith("cuda") else []),
             *(["--wait-go"] if deferred else [])],
            cwd=self.scratch, env=scrubbed_env(self.scratch, device), stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=subprocess.STDOUT, pass_fds=(child.fileno(),),
            start_new_session=True, preexec_fn=_limit_self, close_fds=True,
        )
        child.close()
        self.wrapped = bool(wrapper)
        self._went = not deferred
        self._ready = False
        self._ready_lock = threading.Lock()
        self._oom = False
        self.device_peak = 0
        """the most device memory the worker's allocator reported holding (its own figure)"""

    # -- health ---------------------------------------------------------------------------------------

    def rss(self) -> int:
        try:
            with open(f"/proc/{self.proc.pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    def peak_rss(self) -> int:
        """The process's high-water resident set (VmHWM): a peak between two looks still counts."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        return self.rss()

    def _poll(self) -> None:
        if self.peak_rss() > self.limits.memory_bytes:
            self._oom = True
            self.kill()
            raise WorkerFault(Reason.OUT_OF_MEMORY,
                              f"the candidate's process used more than {self.limits.memory_bytes >> 20} MiB of host memory")

    def stray_processes(self) -> list[int]:
        """Live processes the candidate started: children of the worker or members of its process group.

        Read from /proc by the trusted side, so it sees a fork that no hook inside the worker saw (libc's
        fork through ctypes, say). Empty under a profiler wrapper, whose process tree is its own.
        """
        if self.wrapped or self.proc.poll() is not None:
            return []
        me, found = self.proc.pid, []
        try:
            entries = os.listdir("/proc")
        except OSError:
            return found
        for entry in entries:
            if not entry.isdigit() or int(entry) == me:
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                state, ppid, pgrp = stat[stat.rindex(")") + 2:].split()[:3]
            except (OSError, ValueError):
                continue
            if state not in ("Z", "X") and (int(ppid) == me or int(pgrp) == me):
                found.append(int(entry))
        return found

    def _died(self, phase: str) -> WorkerFault:
        if self._oom:
            return WorkerFault(Reason.OUT_OF_MEMORY, f"the candidate's process exceeded its memory limit during {phase}")
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait()
        if code < 0:
            sig = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            if -code == signal.SIGKILL and self.rss() == 0:
                return WorkerFault(Reason.CRASHED, f"the candidate's process was killed ({sig}) during {phase} "
                                   "(possibly out of memory)")
            return WorkerFault(Reason.CRASHED, f"the candidate's process died from {sig} during {phase}")
        return WorkerFault(Reason.CRASHED, f"the candidate's process exited (status {code}) during {phase}: "
                           "a candidate must return from forward, never exit")

    # -- protocol -------------------------------------------------------------------------------------

    def go(self) -> None:
        """Let a deferred worker create its CUDA context now (no-op if it was told already)."""
        with self._ready_lock:
            if self._went:
                return
            self._went = True
            self.started = time.monotonic()  # the start-up limit counts from here
            try:
                wire.send(self.sock, {"op": "go"}, timeout=5.0)
            except wire.WireError:
                pass  # it died: waiting for it says how

    def wait_ready(self) -> dict[str, Any]:
        self.go()
        with self._ready_lock:
            return self._wait_ready()

    def _wait_ready(self) -> dict[str, Any]:
        if self._ready:
            return self.info
        remaining = self.limits.startup_s - (time.monotonic() - self.started)
        header, _ = self._receive(max(remaining, 1.0), "start-up")
        if header.get("op") != "ready":
            raise WorkerFault(Reason.WORKER_ERROR, "the worker did not start properly")
        self._ready = True
        self.startup_s = time.monotonic() - self.started
        self.info = header
        if self.on_ready is not None:
            self.on_ready(self)
        return header

    def request(self, header: dict[str, Any], payload: Any, timeout: float, phase: str,
                max_bytes: int = 1 << 34, compiles: bool = False) -> tuple[dict[str, Any], Any]:
        """Send one request and wait for the reply. With `compiles`, the deadline moves on while the
        worker's Triton cache grows (see `Limits`)."""
        self.wait_ready()
        try:
            wire.send(self.sock, header, payload, timeout=max(timeout, 30.0))
        except wire.WireError as e:
            raise self._died(phase) if self.proc.poll() is not None else WorkerFault(
                Reason.WORKER_ERROR, f"could not send to the worker: {e}") from e
        return self._receive(timeout, phase, max_bytes, compiles)

    def _receive(self, timeout: float, phase: str, max_bytes: int = 1 << 34,
                 compiles: bool = False) -> tuple[dict[str, Any], Any]:
        start = time.monotonic()
        compiled_until = [start]
        poll = self._poll
        if compiles:
            base_mtime = _latest_mtime(self.cache_dir)

            def poll() -> None:
                self._poll()
                now = time.monotonic()
                if now - start <= timeout:
                    return
                latest = _latest_mtime(self.cache_dir)
                if latest > base_mtime:
                    compiled_until[0] = max(compiled_until[0], now - max(time.time() - latest, 0.0))
                if now - compiled_until[0] > self.limits.compile_quiet_s:
                    raise _Expired()
        cap = max(timeout, self.limits.compile_cap_s) if compiles else timeout
        try:
            reply = wire.recv(self.sock, timeout=cap, max_bytes=max_bytes, poll=poll)
            peak = reply[0].get("device_peak")
            if isinstance(peak, int):  # the worker's word: informative only (a memory figure, never a verdict)
                self.device_peak = max(self.device_peak, peak)
            # The watchdog also looks once per reply: a quick phase (a load that hoards memory in well under
            # the half-second poll interval, on a fast machine) must not slip past it.
            self._poll()
            return reply
        except (wire.WireTimeout, _Expired):
            self.kill()
            spent = time.monotonic() - start
            compiling = compiled_until[0] - start
            how = f" ({compiling:.0f} s of it compiling)" if compiles and compiling > 1 else ""
            raise WorkerFault(Reason.TIMEOUT, f"the candidate did not finish {phase} within {spent:.0f} s{how}; "
                              f"its limit there is {timeout:.0f} s of execution") from None
        except wire.PeerClosed:
            raise self._died(phase) from None
        except wire.WireError as e:
            self.kill()
            raise WorkerFault(Reason.CRASHED, f"the candidate's process sent a malformed message during {phase} ({e})") from None

    def log_tail(self, limit: int = LOG_LIMIT) -> str:
        try:
            self._log.flush()
            size = os.path.getsize(self.log_path)
            with open(self.log_path, "rb") as f:
                f.seek(max(0, size - limit))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.warning("worker %s did not die within 10 s of SIGKILL", self.proc.pid)

    def close(self) -> None:
        if self.proc.poll() is None and self._ready:
            try:
                wire.send(self.sock, {"op": "exit"}, timeout=1.0)
                self.proc.wait(timeout=2)
            except (wire.WireError, subprocess.TimeoutExpired):
                pass
        self.kill()
        try:
            # Kill anything that left the process group and still lingers, then drop the scratch space.
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.sock.close()
        self._log.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


_PR_SET_PDEATHSIG = 1


def _limit_self() -> None:
    """Runs in the child between fork and exec: no core dumps, bounded files, death with the parent."""
    import ctypes
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the worker's own parent watch still applies
        pass


class WorkerPool:
    """Hands out fresh workers for one device, keeping `spares` started ahead of need."""

    def __init__(self, device: str, limits: Limits | None = None, spares: int = 1,
                 defer: bool | None = None) -> None:
        # "cuda" becomes "cuda:N" here, once: a worker sets that exact device, and an Evaluator sharing the
        # pool must judge on the same one.
        self.device = str(resolve_device(device))
        self.limits = limits or Limits()
        self.spares = spares
        self.defer = self.device.startswith("cuda") if defer is None else defer
        self._ready: deque[Worker] = deque()
        self._lock = threading.Lock()
        self._closed = False
        self._base_cache: str | None = None
        self.fill(start=True)

    def _new(self) -> Worker:
        return Worker(self.device, self.limits, base_cache=self._base_cache, on_ready=self._seed,
                      deferred=self.defer)

    def _seed(self, worker: Worker) -> None:
        """Keep the Triton cache of the first worker to come up, before any candidate ran in it."""
        if self._base_cache is None:
            base = tempfile.mkdtemp(prefix="kw-triton-base-")
            shutil.copytree(worker.cache_dir, base, dirs_exist_ok=True)
            self._base_cache = base

    def fill(self, start: bool = False) -> None:
        """Top the spares up. New CUDA workers import at once but wait to create their context, which
        holds the GPU in shared use, until `start` (or until `acquire` lets the next one go)."""
        with self._lock:
            while not self._closed and len(self._ready) < self.spares:
                self._ready.append(self._new())
            first = self._ready[0] if start and self._ready else None
        if first is not None:
            first.go()

    def acquire(self) -> Worker:
        """A fresh worker. The pool is topped up at once only when it ran dry; otherwise the caller calls
        `fill()` when its evaluation is over, so a spare's start-up (which holds the GPU in shared use while
        it creates its context) does not land inside that evaluation's timing.

        The next spare in line is let go now: its context is created while this evaluation runs its trials
        (shared use of the GPU, as those are), long before this evaluation measures; the others only import."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker pool is closed")
            worker = self._ready.popleft() if self._ready else self._new()
            dry = not self._ready
        worker.go()
        if dry:
            self.fill()
        with self._lock:
            following = self._ready[0] if self._ready else None
        if following is not None:
            following.go()
        return worker

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers = list(self._ready)
            self._ready.clear()
        for w in workers:
            w.close()
        if self._base_cache:
            shutil.rmtree(self._base_cache, ignore_errors=True)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
