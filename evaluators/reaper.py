"""Processes a candidate left behind: the trusted process adopts them (a child subreaper) and kills them.

A worker is its own process group, killed as a group, and dies with the trusted process (PR_SET_PDEATHSIG).
A candidate that forks a grandchild which calls setsid() or setpgid() leaves that group: when its parent
(the worker, or a middle process) ends, the kernel re-parents it, to init unless an ancestor has asked to be
a *child subreaper*, and it runs on with its GPU context, its memory and its CPU. So the trusted process asks
(`become_subreaper`): every such orphan becomes its child, and `sweep` kills it.

What marks an orphan as the candidate's, and not one of the trusted process's own children (Inductor's compile
workers, ptxas, a profiler): it is *more confined than the trusted process*. Every worker sets no_new_privs and
installs a seccomp filter (`sandbox.no_sockets`) before candidate code runs, and neither can ever be removed
by the process or its descendants, whatever they exec; the trusted process's own children inherit only what
the trusted process has (a container's seccomp profile, say). The live workers themselves are confined too,
so the caller names them (`known`) and they are left alone.

Only the pids found are reaped (`os.waitpid(pid, WNOHANG)`), never with a blanket `waitpid(-1)`, which would
take the exit status `subprocess` and `multiprocessing` wait for. An unconfined orphan (a legitimate tool that
daemonised) that ends is left a zombie: nothing tells it apart from a child someone else waits for.

Linux only (prctl, /proc); elsewhere `become_subreaper` says False and `sweep` finds nothing. Imports nothing
of kernelwright.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36
_MAX_ROUNDS = 32
"""sweeps in a row while each finds something: killing an orphan hands its own children to us, next round"""
_REAP_S = 2.0
"""how long one kill waits for its process to end; one stuck in the kernel (a GPU driver call) is reaped later"""

_state_lock = threading.Lock()
_sweep_lock = threading.Lock()
_subreaper: bool | None = None


def become_subreaper() -> bool:
    """Make this process a child subreaper (once; later calls say what the first did). False, said once in
    the log, where the system has no such thing or refuses it: orphans then go to init and outlive us."""
    global _subreaper
    with _state_lock:
        if _subreaper is None:
            _subreaper, why = _ask()
            if not _subreaper:
                log.warning("this process cannot adopt what a candidate leaves behind (%s): a process that "
                            "leaves its worker's process group may outlive the evaluation", why)
            elif _indistinct():
                log.warning("this process already has no_new_privs and a seccomp filter, and the kernel does not "
                            "count filters (before Linux 5.9): what a candidate leaves behind cannot be told from "
                            "this process's own children, so none is killed")
        return _subreaper


def _indistinct() -> bool:
    """Whether a worker cannot look more confined than this process (`sweep`'s mark): this process has
    no_new_privs and a seccomp filter already, and the kernel gives the filters' mode, not their count."""
    try:
        with open("/proc/self/status") as f:
            keys = dict(line.partition(":")[::2] for line in f)
    except OSError:
        return False
    return "Seccomp_filters" not in keys and keys.get("NoNewPrivs", "").strip() == "1" \
        and keys.get("Seccomp", "").strip() == "2"


def _ask() -> tuple[bool, str]:
    if not sys.platform.startswith("linux"):
        return False, f"no child subreaper on {sys.platform}"
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return False, f"prctl(PR_SET_CHILD_SUBREAPER) refused: {os.strerror(ctypes.get_errno())}"
    except (OSError, AttributeError) as e:
        return False, f"no prctl: {e}"
    return True, "a child subreaper"


def _confinement(pid: int | str) -> tuple[int, int] | None:
    """(no_new_privs, seccomp filters) of a process from /proc; None if it is gone. Where the kernel does not
    count filters (before 5.9), filter mode counts as one."""
    nnp, mode, filters = 0, 0, None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key == "NoNewPrivs":
                    nnp = int(value)
                elif key == "Seccomp":
                    mode = int(value)
                elif key == "Seccomp_filters":
                    filters = int(value)
    except (OSError, ValueError):
        return None
    return nnp, filters if filters is not None else int(mode == 2)


def _children(me: int) -> list[tuple[int, str, int]]:
    """(pid, state, process group) of each process whose parent is `me`."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            state, ppid, pgrp = stat[stat.rindex(")") + 2:].split()[:3]
            if int(ppid) == me:
                found.append((int(entry), state, int(pgrp)))
        except (OSError, ValueError):
            continue
    return found


def _reap(pid: int, wait_s: float) -> bool:
    """Collect our child `pid`'s exit status, waiting up to `wait_s` for it to end; whether it was collected."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return True  # collected already (a concurrent sweep)
        if done == pid:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


def sweep(known: Callable[[], set[int]]) -> list[int]:
    """Kill and reap this process's confined children that are not in `known()` (the live workers' pids, asked
    again in every round, after the scan: a spare started while another sweep held the lock is confined a second
    after it is spawned and must not be taken for an orphan); the pids killed. Confined zombies (orphans that ended
    by themselves) are reaped too, and not counted. An orphan still in a live worker's process group is left to
    that worker's own end (its group is killed with it), so that one evaluation's sweep never ends another's.

    A confined child of ours that is not a live worker is something a candidate left behind: the kernel made
    it ours when its parent ended. Its process group goes with it unless the group is ours. Killing it hands
    its own children to us, so the sweep repeats while it finds something (bounded). One /proc scan when there
    is nothing to find."""
    if not sys.platform.startswith("linux"):
        return []
    me, our_group = os.getpid(), os.getpgrp()
    own = _confinement("self") or (0, 0)
    killed: list[int] = []
    handled: set[int] = set()  # one that did not end within _REAP_S is not waited for again in this sweep
    with _sweep_lock:
        for _ in range(_MAX_ROUNDS):
            found = False
            children = _children(me)
            live = known()  # workers' pids, which are also their process groups
            for pid, state, pgrp in children:
                if pid in live or pgrp in live or pid in handled:
                    continue
                conf = _confinement(pid)
                if conf is None or not (conf[0] > own[0] or conf[1] > own[1]):
                    continue
                found = True
                handled.add(pid)
                if state in ("Z", "X"):
                    _reap(pid, 0.0)
                    log.info("reaped process %d, which a candidate left behind and which ended by itself", pid)
                    continue
                try:
                    os.kill(pid, signal.SIGKILL)
                    if pgrp != our_group and pgrp > 1:
                        os.killpg(pgrp, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                _reap(pid, _REAP_S)
                killed.append(pid)
            if not found:
                break
    if killed:
        log.warning("killed %d process(es) a candidate left behind: pids %s", len(killed),
                    ", ".join(map(str, killed)))
    return killed
