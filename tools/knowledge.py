"""The knowledge store: what earlier runs learned, kept across runs on this machine.

A step whose measured gain beats its noise band becomes one `Knowledge` entry (symptom and evidence -> move ->
measured effect, with the GPU, the problem's kinds and the run and step it came from). All entries live in one
JSON-lines file: by default `$XDG_DATA_HOME/kernelwright/knowledge.jsonl` (`~/.local/share/kernelwright/...`
when XDG_DATA_HOME is unset), or a path the run names. Runs append to it concurrently (several runs on one
machine), so an append is one write of one line under an exclusive lock; a line that cannot be read (a write cut
short, a hand edit) is skipped and counted, never fatal. Choosing entries for a prompt is `agents/playbook.py`'s
work; this module only stores. Imports nothing above tools/.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .runstore import atomic_write

log = logging.getLogger(__name__)

FILE_NAME = "knowledge.jsonl"
EVIDENCE_LINES = 3
"""evidence lines kept per entry (the diagnosis's first ones)"""
EVIDENCE_CHARS = 300
"""an evidence line kept whole up to this (the diagnoses of six relay runs on an H100 and an H200, 125 lines: median
84 characters, 90 % within 142, the longest 268)"""
WHAT_CHARS = 600
"""a proposal's `what` kept whole up to this (the same runs' 24 proposals: median about 440 characters, 22 within 600,
the longest 970); at 300 entries broke off inside their values ('BLOCK 40…', issue 23)"""
CLAUSE_ENDS = (". ", "; ", ", ")
"""where a text too long to keep whole may be cut: after a sentence or a clause, never inside a value"""


def shorten(text: str, limit: int) -> str:
    """`text` on one line, whole when it fits in `limit` characters; else cut at its last sentence or clause boundary
    (`CLAUSE_ENDS`) that keeps at least half of the limit, else at its last space, and marked with an ellipsis, so a
    cut never splits a number or a name ('nprog computed first as min(NCH…' told a model nothing it could use, issue
    23). Only a text with no space in its first `limit` characters is cut inside a word."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    window = text[: limit - 1]  # a cut at i keeps text[:i + 1] at most, then " …": within the limit
    best = max(window.rfind(end) for end in CLAUSE_ENDS)
    if best >= limit // 2:
        return text[: best + 1].rstrip(",;") + " …"
    space = window.rfind(" ")
    if space > 0:
        return text[:space].rstrip(",;") + " …"
    return text[: limit - 1] + "…"


class Knowledge(BaseModel):
    """One measured winning step, with its provenance."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    id: str
    """`<run id>/<step id>`: unique, and what `kernelwright knowledge show` takes"""
    date: str
    """when the step was recorded (local time, ISO 8601)"""
    run_id: str
    step_id: str
    problem: str
    """the problem's name (its file's stem, or its folder's name for a `problem.py`)"""
    kinds: list[str] = Field(default_factory=list)
    """the problem's kinds (`evaluators.kinds`): matmul, conv, row_reduction, strided, elementwise"""
    gpu: str
    """the GPU the child was measured on"""
    versions: dict[str, str] = Field(default_factory=dict)
    """torch and triton versions of the measurement"""
    bottleneck: str = "unknown"
    """the diagnosis's bottleneck (memory, compute, latency, occupancy, spills, unknown)"""
    evidence: list[str] = Field(default_factory=list)
    """the diagnosis's first evidence lines, short"""
    category: str = "other"
    """the proposal's category"""
    key: str
    """the proposal's key (e.g. split-row-64)"""
    what: str = ""
    """the change, as the proposal said it"""
    speedup: float
    """parent time / child time, as measured"""
    noise_band: float = 0.0
    """the measurement's noise band (relative): the gain beat it"""
    child_ms: float | None = None
    vs_compile: float | None = None
    """the child against torch.compile (compile time / child time)"""
    fraction_of_floor: float | None = None
    """roofline floor / child time"""
    policy: str = ""
    """who proposed the move: builtin, or the strategist's model"""


def default_path() -> Path:
    """`$XDG_DATA_HOME/kernelwright/knowledge.jsonl`, `~/.local/share/kernelwright/knowledge.jsonl` without it."""
    root = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(root) / "kernelwright" / FILE_NAME


def problem_name(path: str) -> str:
    """A problem's short name: `examples/softmax/problem.py` -> softmax, `.../40_LayerNorm.py` -> 40_LayerNorm."""
    p = Path(path)
    return p.parent.name if p.stem == "problem" and p.parent.name else p.stem


def parse_lines(text: str) -> Iterator[tuple[int, Knowledge | None]]:
    """Each non-blank line of a store's text, numbered from 1, as its entry or None when it is not one."""
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield n, Knowledge.model_validate(json.loads(line))
        except (ValueError, ValidationError):
            yield n, None


class KnowledgeStore:
    """The entries in one file. Reading never raises for the file's content; `skipped` counts unreadable lines
    of the last read."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path).expanduser() if path else default_path()
        self.skipped = 0

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive lock beside the file, held while it is appended to or cleared (other runs wait)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(f".{self.path.name}.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def append(self, entry: Knowledge) -> None:
        """Add one entry as one line, written at once under the lock; a last line left without its newline (a
        write cut short) is closed first, so the new entry never joins it."""
        line = entry.model_dump_json() + "\n"
        with self._locked():
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size:
                    with open(self.path, "rb") as f:
                        f.seek(size - 1)
                        if f.read(1) != b"\n":
                            line = "\n" + line
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)

    def entries(self) -> list[Knowledge]:
        """Every readable entry, oldest first (none when the file does not exist); a later entry with the same
        id replaces an earlier one (a step recorded again when its run was resumed)."""
        self.skipped = 0
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        except OSError as e:
            log.warning("the knowledge store %s cannot be read: %s", self.path, e)
            return []
        found: dict[str, Knowledge] = {}
        for n, e in parse_lines(text):
            if e is None:
                self.skipped += 1
                log.warning("%s: line %d is not a knowledge entry; skipped", self.path, n)
                continue
            found.pop(e.id, None)
            found[e.id] = e
        return list(found.values())

    def find(self, ident: str) -> Knowledge | None:
        """The entry with this id, or the only one whose id starts with it; None when none or several match."""
        es = self.entries()
        exact = [e for e in es if e.id == ident]
        if exact:
            return exact[0]
        prefixed = [e for e in es if e.id.startswith(ident)]
        return prefixed[0] if len(prefixed) == 1 else None

    def matching(self, ident: str) -> list[Knowledge]:
        """Every entry whose id starts with `ident` (to say why `find` found none: none, or several)."""
        return [e for e in self.entries() if e.id.startswith(ident)]

    def export_lines(self) -> list[str]:
        """Every readable entry as one JSON line each (what `export` writes)."""
        return [e.model_dump_json() for e in self.entries()]

    def export(self, to: str | Path) -> int:
        """Write every readable entry to `to` as JSON lines (atomically); returns how many."""
        lines = self.export_lines()
        atomic_write(Path(to), "".join(line + "\n" for line in lines))
        return len(lines)

    def import_lines(self, text: str) -> tuple[int, int, list[int]]:
        """Add the entries of `text` (JSON lines, as `export` writes them: another machine's store, or a GPU host's
        that is given back with its disk) that this store does not hold yet, by id; returns (added, already
        here, the numbers of the lines that are not knowledge entries). Nothing is added when no line is one."""
        have = {e.id for e in self.entries()}
        new: list[Knowledge] = []
        bad: list[int] = []
        already = 0
        for n, e in parse_lines(text):
            if e is None:
                bad.append(n)
                continue
            if e.id in have:
                already += 1
                continue
            have.add(e.id)
            new.append(e)
        for e in new:
            self.append(e)
        return len(new), already, bad

    def clear(self) -> int:
        """Remove every entry (the file is emptied, under the lock); returns how many there were."""
        n = len(self.entries())
        if self.path.exists():
            with self._locked():
                atomic_write(self.path, "")
        return n


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")
