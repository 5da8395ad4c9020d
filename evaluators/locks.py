"""One measurement at a time per GPU, and nothing else on that GPU while it runs.

Timing and Nsight Compute runs take the lock exclusively; correctness trials and reference runs take it
shared, so they may overlap each other but never a measurement. File locks (`flock`) make this hold
across threads and across kernelwright processes on one machine; a turnstile lock keeps a waiting
measurement from being starved by a stream of shared holders.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from .roofline import cache_dir


def lock_paths(device: torch.device) -> tuple[str, str]:
    folder = cache_dir() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    key = f"{device.type}{device.index or 0}"
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


@contextmanager
def measurement_lock(device: torch.device, timeout: float = 600.0) -> Iterator[None]:
    """Exclusive use of the GPU for a measurement; LockTimeout if others hold it longer than `timeout`
    (a worker stuck while creating its context, say)."""
    main, gate = lock_paths(device)
    with _flock(gate, fcntl.LOCK_EX, timeout), _flock(main, fcntl.LOCK_EX, timeout):
        yield


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
