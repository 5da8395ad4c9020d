"""One measurement at a time per GPU, and nothing else on that GPU while it runs.

Timing and Nsight Compute runs take the lock exclusively; correctness trials and reference runs take it
shared, so they may overlap each other but never a measurement. File locks (`flock`), named by the GPU's
UUID, make this hold across threads and across kernelwright processes on one machine, whatever index each
process knows the GPU by; a turnstile lock keeps a waiting
measurement from being starved by a stream of shared holders.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from .roofline import cache_dir

log = logging.getLogger(__name__)

_WARNED: set[int] = set()
"""GPU indices whose missing UUID was already warned about"""


def gpu_key(device: torch.device) -> str:
    """A name for the physical GPU behind `device`: its UUID, so that processes that see it under different
    indices (CUDA_VISIBLE_DEVICES differs, as it does between Ray actors on one node) share one lock, and
    processes on different GPUs never do."""
    index = device.index or 0
    if device.type == "cuda":
        try:
            return f"cuda-{torch.cuda.get_device_properties(index).uuid}"
        except (RuntimeError, AttributeError, AssertionError) as e:
            # no UUID to be had: the index is right only when every process sees the same GPUs
            if index not in _WARNED:
                _WARNED.add(index)
                log.warning("GPU %d has no readable UUID (%s); its lock is named by index, which processes with "
                            "different CUDA_VISIBLE_DEVICES do not share", index, e)
    return f"{device.type}{index}"


def lock_paths(device: torch.device) -> tuple[str, str]:
    folder = cache_dir() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    key = gpu_key(device)
    return str(folder / f"{key}.lock"), str(folder / f"{key}.gate")


class LockTimeout(TimeoutError):
    """The GPU stayed in use by others for longer than a measurement may wait."""


@contextmanager
def _flock(path: str, mode: int, timeout: float | None = None) -> Iterator[None]:
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        if timeout is None:
            fcntl.flock(fd, mode)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise LockTimeout(f"the GPU was busy for more than {timeout:.0f} s") from None
                    time.sleep(0.005)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


LOG_ENV = "KERNELWRIGHT_LOCK_LOG"
"""a file to which every measurement appends one JSON line (GPU, host, pid, wall-clock start and end) as it
ends, before it lets go of the GPU: an audit of who measured what when, e.g. to show that no two measurements on one GPU
ever overlapped across processes, actors or hosts (`bench/lock_audit.py`)"""


@contextmanager
def measurement_lock(device: torch.device, timeout: float = 600.0) -> Iterator[None]:
    """Exclusive use of the GPU for a measurement; LockTimeout if others hold it longer than `timeout`
    (a worker stuck while creating its context, say)."""
    main, gate = lock_paths(device)
    with _flock(gate, fcntl.LOCK_EX, timeout), _flock(main, fcntl.LOCK_EX, timeout):
        start = time.time()
        try:
            yield
        finally:
            _audit(device, start, time.time())


def _audit(device: torch.device, start: float, end: float) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    line = json.dumps({"gpu": gpu_key(device), "host": socket.gethostname(), "pid": os.getpid(),
                       "start": start, "end": end}) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one write on O_APPEND: lines from many processes never interleave
        finally:
            os.close(fd)
    except OSError:
        pass  # an audit that cannot be written must not fail the measurement


@contextmanager
def shared_use(device: torch.device, paths: tuple[str, str] | None = None) -> Iterator[None]:
    """Use of the GPU that may overlap other shared use, but no measurement. A worker, whose cache
    directory differs, is given the `paths` of its parent's lock files."""
    if device.type != "cuda":
        yield
        return
    main, gate = paths or lock_paths(device)
    with _flock(gate, fcntl.LOCK_EX):
        pass  # wait our turn behind any measurement already queued
    with _flock(main, fcntl.LOCK_SH):
        yield
