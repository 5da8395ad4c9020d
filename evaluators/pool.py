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
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch

from . import reaper, sandbox, wire
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
    if src.get(sandbox.REPORT_UNCONFINED_ENV):  # a test switch that can only make the worker refuse more
        env[sandbox.REPORT_UNCONFINED_ENV] = "1"
    return env


_SCRATCH_ROOT: str | None = None
_SCRATCH_LOCK = threading.Lock()


def scratch_root() -> str:
    """This process's private folder (0700) that holds its workers' scratch folders, made on first use and
    removed at exit. One folder per trusted process, so a worker's sandbox can refuse it (and the temporary
    folder around it) as a whole and grant only the worker's own scratch (see `sandbox.py`)."""
    global _SCRATCH_ROOT
    with _SCRATCH_LOCK:
        if _SCRATCH_ROOT is None or not os.path.isdir(_SCRATCH_ROOT):
            import atexit

            _SCRATCH_ROOT = tempfile.mkdtemp(prefix=sandbox.SCRATCH_PARENT_PREFIX)
            atexit.register(_remove_scratch_root, _SCRATCH_ROOT, os.getpid())
        return _SCRATCH_ROOT


def _remove_scratch_root(path: str, owner: int) -> None:
    if os.getpid() == owner:  # a forked child that exits normally leaves its parent's workers alone
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class WorkerFault(Exception):
    """The worker stopped being a worker: it hung, died or broke the protocol. Carries the verdict."""

    reason: Reason
    detail: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


@dataclass
class WorkerStartFailure(WorkerFault):
    """The worker failed before any candidate code was sent to it: it died, hung or broke the protocol during
    its start-up (imports, the device's context, the warm-up, the sandbox) or while it was waited for. Nothing
    of the candidate ran there, so this is the evaluator's failure, never the candidate's: its reason is
    `evaluator_error`, which comes with verdict "error" (a CUDA context that cannot be made on a full device
    must not read as a kernel that crashed or exited)."""

    status: int | None = None
    """the process's exit status (negative: the signal that ended it); None while it still ran"""
    log: str = ""
    """the last lines of the worker's own output (a traceback's last line, typically)"""

    @property
    def out_of_memory(self) -> bool:
        """Whether the worker's own output says it ran out of memory (a device too full for its context)."""
        return "out of memory" in self.log.lower()


def _last_lines(text: str, lines: int = 2, limit: int = 300) -> str:
    """The last `lines` telling lines of a log, on one line: a traceback's caret and tilde markers left out,
    its end kept where it is too long."""
    kept = [line.strip() for line in text.splitlines() if line.strip() and line.strip().strip("^~ ")]
    said = " | ".join(kept[-lines:])
    return said if len(said) <= limit else "…" + said[-(limit - 1):]


@dataclass
class Limits:
    """Per-phase wall-clock limits (seconds) and the host-memory limit of one candidate process.

    Compilation and execution are limited separately. Execution limits left at None are scaled from the
    reference forward's own measured time (`scaled`), with a floor, so a hang on a small problem is judged
    in seconds and a large problem is never cut short.

    Compilation draws on one allowance per evaluation (`compile_allowance`), fixed before the candidate
    runs and stated in the verdict's phases: a phase that may compile (the import, the first forward, a
    profile) may run past its execution limit only while the worker is seen compiling new kernels (see
    `CompileLedger`), and every second past the limit is drawn from that allowance, whichever phase draws
    it. Nothing the candidate does can make the allowance larger; progress only decides whether a phase
    may draw on what is left. So a candidate that fakes compilation forever is judged `timeout` at the
    latest its execution limit plus the allowance after its phase began."""

    startup_s: float = 120.0
    load_s: float = 30.0
    first_call_s: float | None = None
    """the first forward's execution limit (before its compile allowance); None: the scaled call limit"""
    call_s: float | None = None
    """every later forward; None: `call_floor_s` or `call_factor` times the reference forward, the larger"""
    timing_s: float | None = None
    """the whole timing request; None: scaled from the repetitions and the reference forward"""
    memory_bytes: int = 16 << 30
    compile_base_s: float = 120.0
    """on a GPU, the compile allowance of an evaluation whatever it declares: Triton's launcher and
    utilities (a C compiler run each) and a first kernel or two"""
    compile_variant_s: float = 15.0
    """on a GPU, added per kernel variant the source declares (`declared_variants`): one compilation of a
    Triton kernel, stage by stage down to ptxas, takes one to ten seconds, rarely more"""
    compile_tune_factor: float = 10.0
    """on a GPU, also added per declared variant, times the reference forward: the autotuner runs every
    config it compiled a few times, and a config may be several times slower than the reference"""
    compile_cap_s: float = 600.0
    """the most compile allowance an evaluation ever gets (also the allowance when nothing was declared)"""
    cpu_compile_s: float = 15.0
    """the whole allowance on the CPU, where Triton's interpreter compiles nothing (an honest candidate
    draws none of it; its kernels' slowness is execution, scaled by `cpu_call_factor`)"""
    compile_quiet_s: float = 20.0
    """a phase past its execution limit stops when nothing new has been compiled for this long"""
    compile_kernel_s: float = 180.0
    """the longest one kernel's compilation is believed to go on: a cache entry stops counting as progress
    this long after it first appeared, however many files it still gains"""
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

    def compile_allowance(self, device_type: str, ref_forward_s: float | None = None,
                          variants: int | None = None) -> float:
        """One evaluation's whole compile allowance, in seconds.

        On a GPU: `compile_base_s`, plus for each kernel variant the candidate's source declares
        (`declared_variants`: its @jit kernels and its autotune configs) one compilation
        (`compile_variant_s`) and the autotuner's runs of it (`compile_tune_factor` times the reference
        forward), never more than `compile_cap_s`; the cap when the variants are not known. An autotuned
        kernel with 20 configs on a 1 ms problem gets 120 + 21 x 15.01 = 435 s. The declaration is the
        candidate's word, so it only moves the allowance between the base and the cap, both stated.
        On the CPU: `cpu_compile_s`, whatever is declared: the interpreter compiles nothing."""
        if device_type == "cpu":
            return self.cpu_compile_s
        if variants is None:
            return self.compile_cap_s
        per = self.compile_variant_s + self.compile_tune_factor * max(ref_forward_s or 0.0, 0.0)
        return min(self.compile_cap_s, self.compile_base_s + max(variants, 1) * per)


class _Expired(Exception):
    """The phase's deadline passed with no compilation going on, or with the compile allowance spent."""


_FIRST_STAGES = (".source", ".ttir")
"""What Triton's compiler puts into a kernel's cache entry first, before the slow stages (down to ptxas)"""
_GROUP_PREFIX = "__grp__"
"""The file Triton puts last into a kernel's cache entry, naming the whole set of artefacts"""


def declared_variants(source: str) -> int:
    """How many kernel variants a candidate's source declares: one per function decorated with a `jit`
    (a Triton kernel compiles at least once) plus one per `Config(...)` (an autotune config compiles
    apart); a `Config` inside a comprehension counts once per element of its literal ranges and lists (8
    for one that is not literal). Only a scale for the compile allowance, which caps it: 0 for a source
    that does not parse."""
    import ast

    from . import pyast

    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError):
        return 0

    def name_of(node: ast.AST) -> str:
        node = node.func if isinstance(node, ast.Call) else node
        return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""

    def length(it: ast.AST) -> int:
        if isinstance(it, (ast.List, ast.Tuple, ast.Set)):
            return max(len(it.elts), 1)
        if isinstance(it, ast.Call) and name_of(it) == "range" and it.args and \
                all(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in it.args):
            return max(len(range(*(a.value for a in it.args))), 1)  # type: ignore[misc]
        return 8

    count = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            count += sum(1 for d in node.decorator_list if name_of(d) == "jit")
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)) and name_of(node.elt) == "Config":
            n = 1
            for gen in node.generators:
                n *= length(gen.iter)
            count += min(n, 256) - 1  # the Config call itself is counted below
        elif isinstance(node, ast.Call) and name_of(node) == "Config":
            count += 1
    return min(count, 1024)


@dataclass
class _Entry:
    """One directory of the worker's Triton cache (Triton's layout: one per cache key) that appeared during
    the evaluation."""

    first_seen: float
    files: set[str]
    building: bool = False
    """holds a Triton compile's first stage and not yet its group file: a kernel being compiled"""
    done: bool = False
    """its artefacts are complete (or it never was a compile in progress): it is no longer evidence"""


class CompileLedger:
    """One evaluation's compile allowance: what it is, what phases drew from it, and the evidence that a
    worker is compiling (the worker is single-use, so a worker's ledger is its evaluation's).

    Evidence, seen by the trusted side in the worker's own Triton cache at each look (about twice a
    second while a compiling phase waits), on its own clock (file times are the candidate's to set):
    - a new cache entry (a directory under the cache, Triton's one-per-key layout) gaining its first
      files, or a file of a new name in an entry still being compiled, is progress;
    - an entry holding a compile's first stage (`.source`/`.ttir`) and not yet its group file
      (`__grp__*`, put last) is a kernel being compiled: ptxas may be silent for longer than the quiet
      window, so such an entry counts as compiling, for at most `compile_kernel_s` after it appeared;
    - nothing else is: rewriting or touching a file (its name is not new), writing into an entry that
      was there before the evaluation compiled anything, into a complete one, or into one that appeared
      more than `compile_kernel_s` ago, files outside an entry, Triton's own temporary folders.
    A phase past its execution limit goes on while the last progress is under `compile_quiet_s` old or
    a kernel is being compiled, and every second it goes on is drawn from the allowance.

    None of this evidence is unforgeable: a candidate can put a new entry through Triton's cache manager
    every second, or really compile a new specialisation every second, which is compilation. That is why
    the evidence never enlarges the allowance: it only lets a phase draw on what is left, and the total,
    fixed before the candidate ran, is the bound. Each look is bounded too (`MAX_ENTRIES` entries,
    `MAX_LISTINGS` folders listed, `MAX_FILES` names each), so a cache flooded with entries slows no
    deadline: what the look cannot read is not evidence."""

    MAX_ENTRIES = 4096
    MAX_LISTINGS = 128
    MAX_FILES = 64

    def __init__(self, cache_dir: str, allowance_s: float, quiet_s: float, kernel_s: float) -> None:
        self.cache_dir = cache_dir
        self.allowance_s = max(allowance_s, 0.0)
        self.quiet_s = quiet_s
        self.kernel_s = kernel_s
        self.used_s = 0.0
        self.record: dict[str, float] | None = None
        """where the figures go as they change (the verdict's phases), so a timeout's verdict states them"""
        self._known: dict[str, _Entry | None] = {}
        """None: there before the first look, or not a folder: never evidence"""
        self._based = False
        self._last_progress = float("-inf")
        self._building_until = float("-inf")

    def left(self) -> float:
        return max(self.allowance_s - self.used_s, 0.0)

    def draw(self, seconds: float) -> float:
        """Charge `seconds` past a phase's execution limit to the allowance (never more than is left);
        the seconds drawn."""
        drawn = min(max(seconds, 0.0), self.left())
        self.used_s += drawn
        self._write()
        return drawn

    def state(self, record: dict[str, float] | None) -> None:
        self.record = record
        self._write()

    def _write(self) -> None:
        if self.record is not None:
            self.record["compile_allowance_s"] = self.allowance_s
            self.record["compile_used_s"] = self.used_s

    def begin(self) -> None:
        """Before the evaluation's first compiling request: what is in the cache now is not its doing."""
        if not self._based:
            self.look(baseline=True)
            self._based = True

    def compiling(self, now: float) -> bool:
        return now - self._last_progress <= self.quiet_s or now <= self._building_until

    def look(self, baseline: bool = False) -> float:
        """Read the cache once for new evidence (with `baseline`: only note what is there); the trusted
        clock after the look."""
        now = time.monotonic()
        progress = False
        building_until = float("-inf")
        listings = 0
        try:
            with os.scandir(self.cache_dir) as it:
                for n, e in enumerate(it):
                    if n >= self.MAX_ENTRIES:
                        break
                    if e.name not in self._known:
                        if len(self._known) >= self.MAX_ENTRIES:
                            continue
                        is_dir = not baseline and e.is_dir(follow_symlinks=False) and not e.name.startswith("tmp.")
                        self._known[e.name] = _Entry(first_seen=now, files=set()) if is_dir else None
                    entry = self._known[e.name]
                    if entry is None or entry.done:
                        continue
                    if now - entry.first_seen > self.kernel_s:
                        entry.done = True
                        continue
                    if listings >= self.MAX_LISTINGS:
                        continue
                    listings += 1
                    names = self._names(e.path)
                    if names - entry.files:
                        entry.files |= names
                        progress = True
                    group = any(f.startswith(_GROUP_PREFIX) for f in entry.files)
                    entry.building = not group and any(f.endswith(_FIRST_STAGES) for f in entry.files)
                    entry.done = bool(entry.files) and not entry.building
                    if entry.building:
                        building_until = max(building_until, entry.first_seen + self.kernel_s)
        except OSError:
            pass
        now = time.monotonic()
        if progress:
            self._last_progress = now
        self._building_until = building_until
        return now

    def _names(self, path: str) -> set[str]:
        names: set[str] = set()
        try:
            with os.scandir(path) as it:
                for n, e in enumerate(it):
                    if n >= self.MAX_FILES:
                        break
                    if not e.name.startswith("tmp.") and e.is_file(follow_symlinks=False):
                        names.add(e.name)
        except OSError:
            pass
        return names


class _Spawner:
    """Starts every worker from one long-lived thread. A worker asks the kernel for SIGKILL when its
    parent dies (PR_SET_PDEATHSIG), and the kernel means the thread that forked it: forking from a
    thread that lives as long as the process ties the worker to the process, not to whichever short-lived
    thread happened to ask for a spare."""

    def __init__(self) -> None:
        import queue

        # Made once per process, before its first worker: from here on whatever a candidate leaves behind when
        # it escapes its worker's process group is re-parented to this process, for `sweep_orphans` to kill.
        reaper.become_subreaper()
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


_WORKERS: weakref.WeakSet[Worker] = weakref.WeakSet()
"""Every worker of this process, whichever pool (or none) started it: the sweep must spare them all"""
_WORKERS_LOCK = threading.Lock()


def sweep_orphans() -> list[int]:
    """Kill what candidates left behind (`reaper.sweep`), sparing every worker of this process that is not yet
    reaped; the pids killed."""
    def known() -> set[int]:
        with _WORKERS_LOCK:
            return {w.proc.pid for w in _WORKERS if w.proc.returncode is None}

    return reaper.sweep(known)


class Worker:
    """One candidate process. Single-use: after `close()` (or any fault) it is gone."""

    def __init__(self, device: str, limits: Limits, wrapper: list[str] | None = None,
                 base_cache: str | None = None, on_ready: Any = None, deferred: bool = False,
                 allow_unconfined: bool = False) -> None:
        """With `deferred`, the process starts and imports at once but creates its CUDA context (which holds
        the GPU in shared use) only when told to (`go()`, or the first request): a spare started while an
        evaluation is running then never delays that evaluation's measurement.

        Under a profiler `wrapper` (ncu) the worker confines itself all the same (`--profiled`). Where it
        cannot confine itself it loads no candidate, unless `allow_unconfined` (the user's opt-out, passed
        on its command line: its environment never carries it)."""
        self.device = device
        self.limits = limits
        self.on_ready = on_ready
        self.scratch = tempfile.mkdtemp(prefix=sandbox.SCRATCH_PREFIX, dir=scratch_root())  # 0700, in a 0700 folder
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
             *(["--profiled"] if wrapper else ["--parent", str(os.getpid())]),
             *(["--allow-unconfined"] if allow_unconfined else []),
             *(["--gpu-lock", *lock_paths(torch.device(device))] if device.startswith("cuda") else []),
             *(["--wait-go"] if deferred else [])],
            cwd=self.scratch, env=scrubbed_env(self.scratch, device), stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=subprocess.STDOUT, pass_fds=(child.fileno(),),
            start_new_session=True, preexec_fn=_limit_self, close_fds=True,
        )
        child.close()
        with _WORKERS_LOCK:
            _WORKERS.add(self)
        self.wrapped = bool(wrapper)
        self._went = not deferred
        self._ready = False
        self._ready_lock = threading.Lock()
        self._start_fault: WorkerStartFailure | None = None
        self._sent = False
        """a request went to the worker since it was ready: from here on a fault may be the candidate's"""
        self._killed = False
        """killed by this side (a limit, a protocol break), not ended by itself"""
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

    def _start_failed(self, fault: WorkerFault | None, what: str = "",
                      after_ready: bool = False) -> WorkerStartFailure:
        """The fault of a worker that failed before any candidate code was sent to it, in one sentence: how
        it failed (its exit status, the signal, the limit it ran past, or `what`) and the last lines of its
        own output. `after_ready`: it said it was ready, then ended before the first request reached it.
        Kept, so that every later wait on this worker gives the same answer."""
        status = self.proc.poll()
        if fault is not None and fault.reason == Reason.TIMEOUT:
            cause = f"it was not ready within the start-up limit of {self.limits.startup_s:.0f} s and was killed"
        elif fault is not None and fault.reason == Reason.OUT_OF_MEMORY:
            cause = (f"its process used more than {self.limits.memory_bytes >> 20} MiB of host memory and "
                     "was killed")
        elif what:
            cause = what
        elif status is None or self._killed:
            cause = "it closed its channel or sent a malformed message, and was killed"
        elif status < 0:
            sig = signal.Signals(-status).name if -status in signal.valid_signals() else str(-status)
            # nothing of this side sent it (a limit sets `_killed` or `_oom`): the host's out-of-memory killer, or
            # another process on the host, which a reader of the verdict should know
            cause = f"its process died from {sig}" + (", sent from outside the evaluator"
                                                       if -status == signal.SIGKILL and not self._oom else "")
        else:
            cause = f"its process exited (status {status})"
        if after_ready:
            cause += " after it said it was ready, before the first request reached it"
        log_said = _last_lines(self.log_tail(4000))
        detail = (f"the worker failed to start: {cause}, before the candidate was loaded (the evaluator's failure, "
                  "not the candidate's); " + (f"its output ends: {log_said}" if log_said else "it wrote nothing"))
        self._start_fault = WorkerStartFailure(Reason.EVALUATOR_ERROR, detail, status=status, log=log_said)
        return self._start_fault

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
        if self._start_fault is not None:  # a second wait on a worker that already failed: the same answer
            raise self._start_fault
        remaining = self.limits.startup_s - (time.monotonic() - self.started)
        try:
            header, _ = self._receive(max(remaining, 1.0), "start-up")
        except WorkerFault as f:
            raise self._start_failed(f) from None
        if header.get("op") != "ready":
            self.kill()
            raise self._start_failed(None, f"it sent {str(header.get('op'))[:40]!r} where its 'ready' was due")
        self._ready = True
        self.startup_s = time.monotonic() - self.started
        self.info = header
        if self.on_ready is not None:
            self.on_ready(self)
        return header

    _ledger: CompileLedger | None = None

    @property
    def compile_ledger(self) -> CompileLedger:
        """This worker's (this evaluation's) compile allowance; until `allow_compiling` says otherwise, the
        allowance of a problem whose variants are unknown (the cap on a GPU)."""
        if self._ledger is None:
            lim = self.limits
            self._ledger = CompileLedger(self.cache_dir, lim.compile_allowance(self.device.split(":")[0]),
                                         lim.compile_quiet_s, lim.compile_kernel_s)
        return self._ledger

    def allow_compiling(self, allowance_s: float, record: dict[str, float] | None = None) -> None:
        """Set the evaluation's compile allowance (`Limits.compile_allowance`), before its first compiling
        request; with `record`, keep `compile_allowance_s` and `compile_used_s` there as they change."""
        ledger = self.compile_ledger
        ledger.allowance_s = max(allowance_s, 0.0)
        ledger.state(record)

    def request(self, header: dict[str, Any], payload: Any, timeout: float, phase: str,
                max_bytes: int = 1 << 34, compiles: bool = False) -> tuple[dict[str, Any], Any]:
        """Send one request and wait for the reply. With `compiles`, the phase may run past `timeout` on
        the evaluation's compile allowance while the worker is seen compiling (see `CompileLedger`)."""
        self.wait_ready()
        if compiles:
            self.compile_ledger.begin()
        try:
            wire.send(self.sock, header, payload, timeout=max(timeout, 30.0))
        except wire.WireError as e:
            if not self._sent and self.proc.poll() is not None:  # it died ready but before any request came
                self._died(phase)  # reaps it
                raise self._start_failed(None, after_ready=True) from None
            raise self._died(phase) if self.proc.poll() is not None else WorkerFault(
                Reason.WORKER_ERROR, f"could not send to the worker: {e}") from e
        self._sent = True
        return self._receive(timeout, phase, max_bytes, compiles)

    def _receive(self, timeout: float, phase: str, max_bytes: int = 1 << 34,
                 compiles: bool = False) -> tuple[dict[str, Any], Any]:
        """The reply, within `timeout`; with `compiles`, past it only while the worker compiles and only
        as long as the compile allowance lasts: the deadline is never later than `timeout` plus what is
        left of the allowance (the socket's own deadline, kept even by a worker that trickles bytes), and
        a look about twice a second ends the phase earlier once nothing is compiling."""
        start = time.monotonic()
        ledger = self.compile_ledger if compiles else None
        left = ledger.left() if ledger is not None else 0.0
        poll = self._poll
        if ledger is not None:
            def poll() -> None:
                self._poll()
                now = ledger.look()
                over = now - start - timeout
                if over > 0 and (over >= left or not ledger.compiling(now)):
                    raise _Expired()

        def drawn() -> float:
            return ledger.draw(time.monotonic() - start - timeout) if ledger is not None else 0.0

        try:
            reply = wire.recv(self.sock, timeout=timeout + left, max_bytes=max_bytes, poll=poll)
        except (wire.WireTimeout, _Expired):
            self.kill()
            spent, drew = time.monotonic() - start, drawn()
            raise WorkerFault(Reason.TIMEOUT, f"the candidate did not finish {phase} within {spent:.0f} s; "
                              f"its limit there is {timeout:.0f} s of execution"
                              + _compile_said(ledger, drew)) from None
        except wire.PeerClosed:
            drawn()
            raise self._died(phase) from None
        except wire.WireError as e:
            self.kill()
            drawn()
            raise WorkerFault(Reason.CRASHED, f"the candidate's process sent a malformed message during {phase} ({e})") from None
        drawn()
        peak = reply[0].get("device_peak")
        if isinstance(peak, int):  # the worker's word: informative only (a memory figure, never a verdict)
            self.device_peak = max(self.device_peak, peak)
        # The watchdog also looks once per reply: a quick phase (a load that hoards memory in well under
        # the half-second poll interval, on a fast machine) must not slip past it.
        self._poll()
        return reply

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
            self._killed = True
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.warning("worker %s did not die within 10 s of SIGKILL", self.proc.pid)
        # Its group is dead; what left the group (setsid) was re-parented to this process when its parent ended.
        sweep_orphans()

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


def _compile_said(ledger: CompileLedger | None, drew: float) -> str:
    """What a timeout's detail says of the compile allowance."""
    if ledger is None:
        return ""
    if ledger.left() < 0.5:
        return (f", plus the evaluation's whole compile allowance of {ledger.allowance_s:.0f} s, now spent "
                f"({drew:.0f} s of it here, while it seemed to compile)")
    return (f"; {drew:.0f} s of it went on while it seemed to compile, then nothing new was compiled for "
            f"{ledger.quiet_s:.0f} s (compile allowance: {ledger.used_s:.0f} of {ledger.allowance_s:.0f} s used)"
            if drew >= 1 else f" (compile allowance: {ledger.used_s:.0f} of {ledger.allowance_s:.0f} s used)")


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
                 defer: bool | None = None, allow_unconfined: bool = False) -> None:
        # "cuda" becomes "cuda:N" here, once: a worker sets that exact device, and an Evaluator sharing the
        # pool must judge on the same one.
        self.device = str(resolve_device(device))
        self.limits = limits or Limits()
        self.spares = spares
        self.defer = self.device.startswith("cuda") if defer is None else defer
        self.allow_unconfined = allow_unconfined
        """the user's opt-out: workers that cannot confine themselves load candidates all the same"""
        self._ready: deque[Worker] = deque()
        self._lock = threading.Lock()
        self._closed = False
        self._base_cache: str | None = None
        self.fill(start=True)

    def _new(self) -> Worker:
        return Worker(self.device, self.limits, base_cache=self._base_cache, on_ready=self._seed,
                      deferred=self.defer, allow_unconfined=self.allow_unconfined)

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
            # a spare that already failed its start-up, or ended, is not handed out (the next evaluation would be
            # an `error` for it): it is closed and the next one taken
            failed = []
            while self._ready and (self._ready[0]._start_fault is not None or self._ready[0].proc.poll() is not None):
                failed.append(self._ready.popleft())
            worker = self._ready.popleft() if self._ready else self._new()
            dry = not self._ready
        for w in failed:
            w.close()
        sweep_orphans()  # nothing a candidate left running shares the machine with the next one
        worker.go()
        if dry:
            self.fill()
        with self._lock:
            following = self._ready[0] if self._ready else None
        if following is not None:
            following.go()
        return worker

    def start_ahead(self, n: int) -> list[Worker]:
        """The next `n` workers `acquire` hands out, started now (beyond `spares` where `n` is larger), for a caller
        that knows evaluations are coming and has time before them (`Evaluator.prepare` waits for them to be
        ready); they stay in the pool. Each holds a CUDA context on a GPU: keep `n` small."""
        with self._lock:
            while not self._closed and len(self._ready) < n:
                self._ready.append(self._new())
            ahead = list(self._ready)[:n]
        for w in ahead:
            w.go()
        return ahead

    def started_spares(self) -> int:
        """Spare workers let go (their CUDA context made, or being made) and not yet handed out: device memory
        the ledger counts as held outside it (`ledger.py`). Read without the pool's lock, which `fill` holds while
        it spawns: a count one spare off for a moment is harmless to an estimate."""
        return sum(1 for w in list(self._ready) if w._went)

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
