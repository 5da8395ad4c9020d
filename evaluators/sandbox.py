"""OS-level confinement of a candidate worker with Linux Landlock, applied before any candidate code runs.

Runs in the worker, after its own start-up (torch, the device, a first Triton kernel) and before the
candidate is imported. Unlike the guards in `guards.py`, which share the candidate's process and can in
principle be subverted from Python, these restrictions are enforced by the kernel for the worker and for
every process it starts:

- writes only beneath the worker's scratch directory (and to /dev/null and GPU device nodes): a candidate
  cannot rewrite the evaluator's sources, a run's archive or anything else on disk, whatever API it finds;
- reads of the system and the Python installation, but not of other processes' /proc entries (their
  environments hold API keys and tokens), home directories, /run or raw devices;
- no TCP connect or bind; no signals to, or abstract-socket connections with, processes outside it;
- no new Unix or IP socket at all (a seccomp filter, any kernel since 3.17): Landlock does not govern
  connecting to a *pathname* Unix socket, and a candidate that reached one could drive whatever listens there
  (a Ray node's raylet, which runs tasks outside the sandbox; Docker's socket; an ssh agent), nor TCP before
  Landlock ABI 4. io_uring, which could open sockets past the filter, is refused too. The worker's own channel
  to the judge was opened before and stays usable.

Reads stop at the worker's own scratch directory: the folder that holds every worker's scratch (and the
temporary folders around it: /tmp, /var/tmp, /dev/shm) is never granted, so a candidate reads nothing of
another worker's scratch, its candidate or its Triton cache. A worker started under a profiler wrapper (ncu)
is confined the same way; the profiler's own injected libraries are readable, nothing more.

No sandbox, no candidate: where confinement cannot apply (no Landlock: before Linux 5.13, gVisor, disabled
at boot; no seccomp filter) the worker says why and refuses to load candidate code, unless the trusted side
started it with the opt-out (`--allow-unconfined`, from `EvalPolicy.allow_unconfined`, whose default is
KERNELWRIGHT_ALLOW_UNCONFINED=1) for a machine the user trusts. The opt-out never switches confinement
off: the worker applies what it can and runs the candidate with what applied. `refusal_here` is the same
decision taken up front in the trusted process, so a command refuses before it starts anything. The
verdict carries the outcome as the `sandbox` check (and `unconfined` as its reason when it refused).
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_REMOVE_DIR, _REMOVE_FILE, _MAKE_CHAR, _MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
_MAKE_REG, _MAKE_SOCK, _MAKE_FIFO, _MAKE_BLOCK, _MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
_REFER, _TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

READ = _READ_FILE | _READ_DIR

HIDDEN_TOP_LEVEL = {"proc", "dev", "root", "home", "run", "boot", "lost+found", "tmp"}
"""Top-level directories a candidate may not read (other than what is explicitly allowed inside them)."""

TEMP_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")
"""Shared temporary folders: never granted wholesale (other workers' scratch, other programs' files)."""

SCRATCH_PARENT_PREFIX, SCRATCH_PREFIX = "kw-workers-", "kw-worker-"
"""Names of the private folder of one trusted process's workers and of each worker's scratch in it (pool.py)."""

ALLOW_UNCONFINED_ENV = "KERNELWRIGHT_ALLOW_UNCONFINED"
"""Set to 1 to run candidate code where the OS sandbox cannot confine it (the CLI's --allow-unconfined sets it):
for a machine the user trusts. Read by the trusted side only; a worker never sees it."""

REPORT_UNCONFINED_ENV = "KERNELWRIGHT_TEST_REPORT_UNCONFINED"
"""Tests only: report the sandbox as unavailable (here and in the workers), so that the refusal and the
opt-out can be tested on a machine that has Landlock. It can only turn a run into a refusal: a worker applies
its confinement all the same, so even with the opt-out the candidate runs confined."""

PROC_ENTRIES = ("self", "thread-self", "cpuinfo", "meminfo", "stat", "sys", "driver", "filesystems", "version",
                "uptime", "loadavg", "devices", "cgroups")
"""System-wide /proc entries libraries read; per-process directories other than the worker's own are hidden."""

DEV_READ = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full")


def _write_rights(abi: int) -> int:
    rights = (_WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_CHAR | _MAKE_DIR | _MAKE_REG | _MAKE_SOCK
              | _MAKE_FIFO | _MAKE_BLOCK | _MAKE_SYM)
    if abi >= 2:
        rights |= _REFER
    if abi >= 3:
        rights |= _TRUNCATE
    return rights


def _readable_paths(scratch: str, profiled: bool = False) -> list[str]:
    """Where the worker may read: the system, the Python installation and the libraries it imports (and,
    `profiled`, the profiler's injected libraries), less every other worker's scratch (`_private`)."""
    paths = [os.path.join("/", e) for e in sorted(os.listdir("/")) if e not in HIDDEN_TOP_LEVEL]
    paths += [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    paths += [p for p in sys.path if p]
    for name in ("torch", "triton", "numpy", "kernelwright", "kernelwright.evaluators"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "__file__", None):
            paths.append(os.path.dirname(mod.__file__))
    for var in ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"):
        paths += [p for p in os.environ.get(var, "").split(os.pathsep) if p]
    for var in ("TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH", "TRITON_LIBCUDA_PATH",
                "TRITON_CUDACRT_PATH", "TRITON_CUDART_PATH"):
        if os.environ.get(var):
            paths.append(os.environ[var])
    if profiled:
        paths += _profiler_paths(os.environ)
    paths = _private(paths, scratch)
    paths += [os.path.join("/proc", e) for e in PROC_ENTRIES] + [f"/proc/{os.getpid()}"]
    paths += list(DEV_READ)
    return paths


def _profiler_paths(environ: Mapping[str, str]) -> list[str]:
    """The folders of the libraries a profiler injected into this process (Nsight Compute sets LD_PRELOAD and
    CUDA_INJECTION64_PATH when it launches its target): they may load more of their own after confinement.
    The scrubbed environment passes neither variable, so only the wrapper can have set them."""
    found = []
    for var in ("LD_PRELOAD", "CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH"):
        for entry in environ.get(var, "").replace(" ", ":").split(":"):
            if entry and os.path.isabs(entry):
                found.append(os.path.dirname(entry))
    return found


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _private(paths: list[str], scratch: str) -> list[str]:
    """`paths` (to be granted with everything beneath them) without any other worker's scratch.

    Landlock only adds rights, so a folder that holds scratch folders (the trusted process's private folder of
    workers, the temporary folder that holds it, /tmp, /var/tmp, /dev/shm) is never granted, nor is a hidden
    top-level folder (/proc, /home, ...) as a whole: a granted ancestor of one (`/` in sys.path, say) is
    replaced by its entries, recursively, less that branch. A path named inside a temporary folder (a virtual
    environment in /tmp) is granted unless it lies in a folder of workers' scratch. Symbolic links are resolved
    first, since a rule holds for what its path resolves to; a link found by listing a folder that resolves
    into a closed or hidden folder is dropped."""
    own = os.path.realpath(scratch)
    parent = os.path.dirname(own)
    temp = {parent, os.path.dirname(parent), *(os.path.realpath(t) for t in TEMP_ROOTS)} - {"/"}
    closed = temp | {os.path.join("/", h) for h in HIDDEN_TOP_LEVEL}
    out: list[str] = []
    seen: set[str] = set()

    def add(path: str, listed: bool, depth: int = 0) -> None:
        real = os.path.realpath(path)
        if real in seen or depth > 16:
            return
        seen.add(real)
        if _inside(real, own):
            out.append(real)
            return
        if real in closed or _inside(real, parent):
            return
        if listed and real != os.path.abspath(path) and any(_inside(real, c) for c in closed):
            return  # a link, found by listing, into a closed or hidden folder (/var/run -> /run, say)
        if any(_inside(real, t) for t in temp) and any(
                part.startswith((SCRATCH_PARENT_PREFIX, SCRATCH_PREFIX)) for part in real.split("/")):
            return  # another trusted process's workers (a device host's, another run's)
        if any(_inside(c, real) for c in closed):  # an ancestor of a closed folder: its other entries only
            try:
                entries = sorted(os.listdir(real))
            except OSError:
                return
            for e in entries:
                add(os.path.join(real, e), True, depth + 1)
            return
        out.append(real)

    for p in paths:
        add(p, False)
    return out


def _gpu_devices() -> list[str]:
    try:
        names = os.listdir("/dev")
    except OSError:
        return []
    found = [os.path.join("/dev", n) for n in names if n.startswith(("nvidia", "dri"))]
    caps = "/dev/nvidia-caps"
    if os.path.isdir(caps):
        found.append(caps)
    return found


class _Landlock:
    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.syscall.restype = ctypes.c_long
        self.kept: list[int] = []  # O_PATH descriptors of /proc rules, kept open so the entries stay the same

    def abi(self) -> int:
        return int(self.libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)))

    def error(self) -> str:
        return os.strerror(ctypes.get_errno())

    def ruleset(self, fs: int, net: int, scoped: int, abi: int) -> int:
        if abi >= 6:
            attr = struct.pack("=QQQ", fs, net, scoped)
        elif abi >= 4:
            attr = struct.pack("=QQ", fs, net)
        else:
            attr = struct.pack("=Q", fs)
        buf = ctypes.create_string_buffer(attr, len(attr))
        return int(self.libc.syscall(_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)))

    def allow(self, ruleset: int, path: str, access: int) -> bool:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if not os.path.isdir(path):
                access &= _FILE_RIGHTS
            rule = ctypes.create_string_buffer(struct.pack("=Qi", access, fd), 12)
            ok = self.libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, rule, ctypes.c_uint32(0)) == 0
        finally:
            if path.startswith("/proc/"):
                self.kept.append(fd)
            else:
                os.close(fd)
        return ok

    def restrict(self, ruleset: int) -> bool:
        if self.libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return self.libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) == 0


_LANDLOCK: _Landlock | None = None

# seccomp: a classic BPF program over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}
_SECCOMP_SYSCALL = {"x86_64": 317, "aarch64": 277}
_SOCKET_SYSCALL = {"x86_64": 41, "aarch64": 198}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_IO_URING_SETUP = 425  # the same on both
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1
_RET_ALLOW, _RET_EACCES = 0x7FFF0000, 0x00050000 | 13
_LD_ABS_W, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_REFUSED_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6


def _socket_filter(machine: str) -> bytes:
    """The filter: on this architecture, socket(AF_UNIX | AF_INET | AF_INET6, ...) and io_uring_setup fail
    with EACCES, as does every call of another architecture's table (x32 on x86_64, and i386's through `int 0x80`,
    whose socketcall would open the same sockets under other numbers); everything else is allowed."""
    ins = [
        (_LD_ABS_W, 0, 0, 4),                                  # 0: arch
        (_JEQ_K, 0, 9, _AUDIT_ARCH[machine]),                  # 1: another architecture's call: refuse (11)
        (_LD_ABS_W, 0, 0, 0),                                  # 2: nr
        (_JGE_K, 7, 0, 0x40000000),                            # 3: x32: refuse (11)
        (_JEQ_K, 6, 0, _IO_URING_SETUP),                       # 4: refuse (11)
        (_JEQ_K, 0, 4, _SOCKET_SYSCALL[machine]),              # 5: not socket(): allow (10)
        (_LD_ABS_W, 0, 0, 16),                                 # 6: args[0], the family (low word)
        (_JEQ_K, 3, 0, _REFUSED_FAMILIES[0]),                  # 7: refuse (11)
        (_JEQ_K, 2, 0, _REFUSED_FAMILIES[1]),                  # 8: refuse (11)
        (_JEQ_K, 1, 0, _REFUSED_FAMILIES[2]),                  # 9: refuse (11)
        (_RET_K, 0, 0, _RET_ALLOW),                            # 10
        (_RET_K, 0, 0, _RET_EACCES),                           # 11
    ]
    return b"".join(struct.pack("=HBBI", *i) for i in ins)


def no_sockets() -> str:
    """Refuse this process (every thread of it, and its future children) new Unix and IP sockets; one line
    saying what was done or why not. Sets no_new_privs, as Landlock does."""
    machine = os.uname().machine
    if not sys.platform.startswith("linux") or machine not in _SECCOMP_SYSCALL or sys.byteorder != "little":
        return f"no seccomp filter for {sys.platform}/{machine}"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"no seccomp filter: no_new_privs refused ({os.strerror(ctypes.get_errno())})"
    code = _socket_filter(machine)
    filt = ctypes.create_string_buffer(code, len(code))
    prog = ctypes.create_string_buffer(struct.pack("=HxxxxxxQ", len(code) // 8, ctypes.addressof(filt)), 16)
    for flags in (_SECCOMP_FILTER_FLAG_TSYNC, 0):  # every thread if it can, else this one and its children
        if libc.syscall(_SECCOMP_SYSCALL[machine], _SECCOMP_SET_MODE_FILTER, flags, prog) == 0:
            return "no new sockets" + ("" if flags else " (this thread)")
    return f"no seccomp filter: {os.strerror(ctypes.get_errno())}"


@dataclass(frozen=True)
class Confinement:
    """What `confine` did: `confined` when both Landlock and the seccomp filter apply; else `missing` says
    what is lacking, in words for a user. `detail` is the verdict's `sandbox` check."""

    confined: bool
    detail: str
    missing: str | None = None


def confine(scratch: str, device: str, profiled: bool = False) -> Confinement:
    """Confine this process (and its future children) as far as this machine allows; say what applied.

    Call from the thread that will run candidate code (the worker's main thread), before importing it.
    `profiled`: the worker runs under a profiler wrapper, whose injected libraries stay readable.
    """
    landlock_ok, landlock = _confine(scratch, device, profiled)
    sockets = no_sockets()
    sockets_ok = sockets.startswith("no new sockets")
    missing = [m for ok, m in ((landlock_ok, landlock), (sockets_ok, sockets)) if not ok]
    if os.environ.get(REPORT_UNCONFINED_ENV):
        missing.append(_SWITCH)
    detail = f"{landlock}; {sockets}" + ("; profiled: the profiler's libraries readable" if profiled else "")
    return Confinement(not missing, detail, "; ".join(m.removeprefix("unavailable: ") for m in missing) or None)


_SWITCH = f"{REPORT_UNCONFINED_ENV} is set, a test switch that only reports the sandbox missing"


def _confine(scratch: str, device: str, profiled: bool = False) -> tuple[bool, str]:
    global _LANDLOCK
    if not sys.platform.startswith("linux"):
        return False, "unavailable: Landlock needs Linux"
    try:
        ll = _Landlock()
    except OSError as e:
        return False, f"unavailable: {e}"
    abi = ll.abi()
    if abi < 1:
        return False, f"unavailable: {_no_landlock(ctypes.get_errno())}"
    write = _write_rights(abi)
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
    ruleset = ll.ruleset(READ | write, net, scoped, abi)
    if ruleset < 0:
        return False, f"unavailable: cannot create a Landlock ruleset ({ll.error()})"
    try:
        if not ll.allow(ruleset, scratch, READ | write):
            return False, f"unavailable: cannot allow the scratch directory ({ll.error()})"
        for path in _readable_paths(scratch, profiled):
            ll.allow(ruleset, path, READ)
        for path in ["/dev/null"] + (_gpu_devices() if device != "cpu" else []):
            ll.allow(ruleset, path, READ | _WRITE_FILE | (_TRUNCATE if abi >= 3 else 0))
        if not ll.restrict(ruleset):
            return False, f"unavailable: landlock_restrict_self failed ({ll.error()})"
    finally:
        os.close(ruleset)
    _LANDLOCK = ll
    parts = ["writes confined to the scratch directory", "reads of other workers' scratch refused",
             "other processes' /proc entries hidden"]
    if net:
        parts.append("no TCP")
    if scoped:
        parts.append("no signals outside the sandbox")
    return True, f"landlock ABI {abi}: " + ", ".join(parts)


def _no_landlock(errno: int) -> str:
    import errno as codes

    if errno == codes.EOPNOTSUPP:
        return "Landlock is disabled on this kernel: it is not in the lsm= boot parameter"
    if errno == codes.ENOSYS:
        return "the kernel has no Landlock: Linux before 5.13, gVisor, or not built in"
    return f"the kernel has no Landlock: {os.strerror(errno)}"


# -- the decision to run candidate code at all ------------------------------------------------------------

_SECCOMP_GET_ACTION_AVAIL, _PR_GET_SECCOMP = 2, 21


def unavailable() -> str | None:
    """Why this machine cannot confine a worker (what is missing, in words for a user), or None when it can.

    A probe that changes nothing in this process: the Landlock ABI version and whether the kernel offers the
    seccomp action the socket filter uses. The worker's own attempt (`confine`) remains the final word."""
    reasons = []
    if not sys.platform.startswith("linux"):
        reasons.append("Landlock and seccomp need Linux")
    else:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        abi = int(libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)))
        if abi < 1:
            reasons.append(_no_landlock(ctypes.get_errno()))
        machine = os.uname().machine
        if machine not in _SECCOMP_SYSCALL or sys.byteorder != "little":
            reasons.append(f"no seccomp socket filter for {machine}")
        else:
            action = ctypes.c_uint32(_RET_EACCES & 0xFFFF0000)
            if libc.syscall(_SECCOMP_SYSCALL[machine], _SECCOMP_GET_ACTION_AVAIL, 0, ctypes.byref(action)) != 0 \
                    and libc.prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) < 0:
                reasons.append(f"the kernel has no seccomp filters: {os.strerror(ctypes.get_errno())}")
    if os.environ.get(REPORT_UNCONFINED_ENV):
        reasons.append(_SWITCH)
    return "; ".join(reasons) or None


def allowed_by_environment(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the user opted out by name: KERNELWRIGHT_ALLOW_UNCONFINED=1 (or true, yes, on)."""
    value = (os.environ if environ is None else environ).get(ALLOW_UNCONFINED_ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def refusal(missing: str) -> str:
    """The one sentence that refuses to run candidate code unconfined: what is missing, how to opt out."""
    return (f"this machine cannot confine candidate code ({missing}), so kernelwright will not run it; on a "
            f"machine you trust, opt out with --allow-unconfined or {ALLOW_UNCONFINED_ENV}=1")


def refusal_here(allow_unconfined: bool | None = None) -> str | None:
    """The refusal sentence when candidate code would run unconfined on this machine and the user has not
    opted out (`allow_unconfined`; None: the environment variable), else None. Every front door that runs
    candidates here (the CLI's commands, the API, the MCP server, the served graph) asks this first."""
    allow = allowed_by_environment() if allow_unconfined is None else allow_unconfined
    if allow:
        return None
    missing = unavailable()
    return refusal(missing) if missing else None
