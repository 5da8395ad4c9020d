"""This machine's process tree, read from /proc, for tests that must find or kill what a process started
(device hosts, a Ray cluster's raylets and actors)."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def children() -> dict[int, list[int]]:
    """Every process's children, by parent pid."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                kids.setdefault(int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]), []).append(int(d.name))
            except (OSError, IndexError, ValueError):
                continue
    return kids


def descendants(root: int) -> list[int]:
    """`root` and every process under it."""
    kids = children()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += kids.get(pid, [])
    return out


def signal_all(pids: list[int], sig: int = signal.SIGKILL) -> None:
    """Send `sig` to each of `pids` that is still there."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
