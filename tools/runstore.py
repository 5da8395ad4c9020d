"""The run directory: everything a run produced, outside the graph state.

    runs/<id>/run.json          what was asked (problem, config) and where it stands (status, best)
    runs/<id>/problem.py        the problem's source as it was when the run started
    runs/<id>/kernels/<h>.py    every kernel source, content-addressed (sha256, 16 hex digits)
    runs/<id>/evals/<h>.json    the verifier's result for that kernel (so no kernel is ever judged twice)
    runs/<id>/trace.jsonl       one complete record per step, appended once per step id
    runs/<id>/archive/<g>.json  the archive as it stood after generation g (the last few are kept); the
                                graph state holds only the generation number it refers to
    runs/<id>/checkpoints.sqlite  LangGraph checkpoints
    runs/<id>/progress.json     what the driver is doing now: its phase and the model calls it waits on
                                (`Progress`; for live views and logs, rewritten as it changes)

State in the graph holds ids and small summaries; sources, results and transcripts live here, so
checkpoints stay small over thousands of steps. Writes are atomic (write to a temporary file, rename).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field


class RunError(Exception):
    """A run that does not exist or cannot be used; the message is one sentence."""


def lineage(steps: Sequence[Any], kernel: str | None) -> list[Any]:
    """How `kernel` was made, from the trace: the steps that led to it from the seed, oldest first, each one's child
    the next one's parent. Steps are the trace's records, as dicts (`Run.trace`) or as objects with the same fields
    (`agents.records.StepRecord`). A kernel made more than once (the same source again) was made by the first step
    that made it and passed verification, or by the first that made it at all when none passed (a failed kernel
    handed off with --force). The report's best path and the hand-off's lineage read it here; `agents.archive.lineage`
    is the live population's view during a run (the admitted ancestors a role is shown), not the record."""
    def get(step: Any, key: str) -> Any:
        return step.get(key) if isinstance(step, dict) else getattr(step, key, None)

    made_by: dict[str, Any] = {}
    for step in steps:
        child = get(step, "child")
        if child and (child not in made_by or (get(made_by[child], "verdict") != "pass"
                                               and get(step, "verdict") == "pass")):
            made_by[child] = step
    chain: list[Any] = []
    seen: set[str] = set()
    h = kernel
    while h and h in made_by and h not in seen:
        seen.add(h)
        chain.append(made_by[h])
        h = get(made_by[h], "parent")
    return chain[::-1]


class ModelUsage(BaseModel):
    """One role's model calls: a step's analyst, strategist or coder, or a first-kernel attempt.

    The one record of model usage (the trace's `llm`, run.json's `seed_attempts`), written from the live counter
    `agents.llm.Usage.record()`."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    model: str = ""
    """the provider:model spec the role used"""
    calls: int = 0
    """model calls made"""
    retries: int = 0
    """transient provider failures retried"""
    input_tokens: int = 0
    output_tokens: int = 0
    tokens: int = 0
    """input + output tokens"""
    cost_usd: float = 0.0
    """at the run's prices (0 when no price was given)"""
    reasoning: list[str] = Field(default_factory=list)
    """the model's reasoning text, where the provider returns it"""
    transcript: str = ""
    """path of the role's full transcript, relative to the run directory"""
    error: str | None = None
    """one sentence, when the role's model failed (the branch then falls back or ends)"""
    error_kind: Literal["provider", "model"] | None = None
    """provider: the service failed for good (retries spent); model: it kept answering unusably"""


class SeedAttempt(ModelUsage):
    """One kernel the coder's model wrote from the reference, when no seed kernel was given: its model usage and
    the verifier's word on it."""

    kernel: str | None = None
    """the kernel's hash, when one was written"""
    verdict: str | None = None
    reason: str | None = None


class RunSetup(BaseModel):
    """What a run was started with (run.json's `config`)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    seed_kernel: str | None = None
    """the seed kernel's hash (given, or chosen from the writer's attempts)"""
    seed_path: str | None = None
    """the file the seed kernel was read from"""
    seed_written_by: str | None = None
    """the model that wrote the seed, when none was given"""
    seed_attempts: list[SeedAttempt] = Field(default_factory=list)
    settings: dict[str, Any] = Field(default_factory=dict, validation_alias=AliasChoices("settings", "context"))
    """the run's settings (`agents.context.RunConfig.as_dict()`), read again on resume; run.json files written
    before 2026-11-27 call it `context` (read as this), a name taken by the live `RunContext`"""


class RunInfo(BaseModel):
    """A run's metadata (run.json): what was asked and where it stands."""

    id: str
    problem: str
    status: str = "created"
    created: str = ""
    updated: str = ""
    steps: int = 0
    best_kernel: str | None = None
    best_speedup: float | None = None
    tokens: int = 0
    """model tokens (input + output) spent so far, all roles and the seed writer"""
    cost_usd: float = 0.0
    config: RunSetup = Field(default_factory=RunSetup)
    stop_reason: str | None = None
    resumable: bool = False
    """the run stopped where `kernelwright optimize --resume ID` continues it: stopped on request (status
    `stopped`), or its model provider stayed down past the retry window (status `failed`)"""
    active_s: float | None = None
    """seconds drivers have spent on the run (all of them, as of the last generation or the last driver's end):
    what the time budget counts, so a run resumed hours later gets the rest of its budget. None: a run.json of an
    earlier version (its time since creation is taken instead)"""


class ModelWait(BaseModel):
    """A model call in flight: which role waits on it, for which step, since when."""

    role: str
    step: str | None = None
    """the step id (g1b0), or what the call is for when it is no step (the first kernel's writing)"""
    since: float
    """when the call began (seconds since the epoch)"""


class Progress(BaseModel):
    """What the driver of a run is doing now (progress.json): a live view or a log reads it to say what the run is
    waiting for between its steps. Empty when no driver works on the run."""

    phase: str | None = None
    """in words: verifying the seed kernel, writing the first kernel, generation 3, ..."""
    phase_since: float | None = None
    """when the phase began (seconds since the epoch)"""
    waiting: list[ModelWait] = Field(default_factory=list)
    """the model calls in flight, oldest first"""


def kernel_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def atomic_write(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` through a temporary sibling and a rename: readers see the old file or
    the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class Run:
    """One run directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._trace = _TraceCache()  # what of trace.jsonl this object has parsed (see `trace`)
        self._progress = Progress()  # what this object's driver does now, written to progress.json as it changes
        self._progress_lock = threading.Lock()
        (path / "kernels").mkdir(parents=True, exist_ok=True)
        (path / "evals").mkdir(exist_ok=True)

    @property
    def id(self) -> str:
        return self.path.name

    @property
    def checkpoint_path(self) -> Path:
        return self.path / "checkpoints.sqlite"

    # -- metadata -------------------------------------------------------------------------------------

    def info(self) -> RunInfo:
        try:
            return RunInfo.model_validate_json((self.path / "run.json").read_text())
        except (OSError, ValueError) as e:
            raise RunError(f"{self.path}: run.json is missing or unreadable ({e})") from e

    def update(self, **fields: Any) -> RunInfo:
        with self._lock:
            info = RunInfo.model_validate({**self.info().model_dump(), **fields,
                                           "updated": time.strftime("%Y-%m-%dT%H:%M:%S")})
            atomic_write(self.path / "run.json", info.model_dump_json(indent=1))
            return info

    def created_at(self) -> float:
        return time.mktime(time.strptime(self.info().created, "%Y-%m-%dT%H:%M:%S"))

    # -- progress ---------------------------------------------------------------------------------------

    def progress(self) -> Progress:
        """What the run's driver (in this process or another) is doing now; empty when nothing says."""
        try:
            return Progress.model_validate_json((self.path / "progress.json").read_text())
        except (OSError, ValueError):
            return Progress()

    def _put_progress(self, change: Any) -> None:
        with self._progress_lock:
            change(self._progress)
            atomic_write(self.path / "progress.json", self._progress.model_dump_json())

    def set_phase(self, phase: str | None) -> None:
        """Say what the driver is doing now (None: nothing worth a word)."""

        def change(p: Progress) -> None:
            if phase != p.phase:
                p.phase, p.phase_since = phase, (time.time() if phase else None)

        self._put_progress(change)

    @contextmanager
    def model_call(self, role: str, step: str | None = None) -> Iterator[None]:
        """Mark a model call in flight for its length (retries through an outage included), so that whoever
        watches the run can say which role waits on the model and for how long."""
        wait = ModelWait(role=role, step=step, since=time.time())
        self._put_progress(lambda p: p.waiting.append(wait))
        try:
            yield
        finally:
            self._put_progress(lambda p: p.waiting.remove(wait) if wait in p.waiting else None)

    def end_progress(self) -> None:
        """The driver let go of the run: no phase, no call in flight."""

        def change(p: Progress) -> None:
            p.phase, p.phase_since, p.waiting = None, None, []

        self._put_progress(change)

    def problem_source(self) -> str:
        return (self.path / "problem.py").read_text()

    # -- kernels and evaluations ----------------------------------------------------------------------

    def put_kernel(self, source: str) -> str:
        h = kernel_hash(source)
        path = self.path / "kernels" / f"{h}.py"
        if not path.exists():
            atomic_write(path, source)
        return h

    def kernel(self, h: str) -> str:
        try:
            return (self.path / "kernels" / f"{h}.py").read_text()
        except OSError as e:
            raise RunError(f"run {self.id} has no kernel {h}") from e

    def kernel_path(self, h: str) -> Path:
        return self.path / "kernels" / f"{h}.py"

    def find_kernel(self, given: str) -> str:
        """The full hash of the one kernel of this run that `given` names or prefixes (hex digits only, so no
        glob or path reaches the file system); a RunError in one sentence otherwise. The one lookup the hand-off
        and the review desk's pin share."""
        wanted = given.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{1,16}", wanted):
            raise RunError(f"{given!r} is not a kernel hash (16 hex digits, or a unique prefix of them)")
        matches = sorted(p.stem for p in (self.path / "kernels").glob("*.py") if p.stem.startswith(wanted))
        if not matches:
            raise RunError(f"run {self.id} has no kernel {given}")
        if len(matches) > 1:
            shown = ", ".join(matches[:4]) + (", ..." if len(matches) > 4 else "")
            raise RunError(f"{given} is the prefix of {len(matches)} kernels of run {self.id} ({shown}): "
                           "give more digits")
        return matches[0]

    def put_eval(self, h: str, result: dict[str, Any]) -> None:
        atomic_write(self.path / "evals" / f"{h}.json", json.dumps(result))

    def eval(self, h: str) -> dict[str, Any] | None:
        path = self.path / "evals" / f"{h}.json"
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text())
        except ValueError:
            return None

    def put_blob(self, kind: str, name: str, text: str) -> Path:
        folder = self.path / kind
        folder.mkdir(exist_ok=True)
        path = folder / name
        atomic_write(path, text)
        return path

    def transcript_prompt(self, rel: str) -> str | None:
        """The first user message of a role's transcript (`rel`: its path in the run directory, as a step record
        names it): what the role was shown. None when missing, unreadable, or outside the run directory."""
        root = self.path.resolve()
        path = (root / rel).resolve()
        if not rel or not path.is_relative_to(root):
            return None
        try:
            messages = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        for m in messages if isinstance(messages, list) else []:
            if isinstance(m, dict) and m.get("role") in ("user", "human"):
                content = m.get("content", "")
                if isinstance(content, list):  # content parts: keep the text ones
                    content = "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
                return str(content)
        return None

    # -- the archive ----------------------------------------------------------------------------------

    ARCHIVE_VERSIONS_KEPT = 3

    def put_archive(self, version: int, data: dict[str, Any]) -> None:
        """Write the archive after generation `version`, and drop versions no checkpoint can still name
        (a resumed run restarts at most one generation back)."""
        folder = self.path / "archive"
        folder.mkdir(exist_ok=True)
        atomic_write(folder / f"{version:06d}.json", json.dumps(data))
        for old in folder.glob("*.json"):
            if old.stem.isdigit() and int(old.stem) <= version - self.ARCHIVE_VERSIONS_KEPT:
                old.unlink(missing_ok=True)

    def archive(self, version: int) -> dict[str, Any]:
        path = self.path / "archive" / f"{version:06d}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise RunError(f"run {self.id} has no readable archive for generation {version}") from e

    # -- the trace ------------------------------------------------------------------------------------

    def trace(self) -> list[dict[str, Any]]:
        """Every complete step record, in order. Read incrementally: a long run's trace is parsed once, then
        only what was appended since (kept by this object: keep one `Run` for the life of a run)."""
        path = self.path / "trace.jsonl"
        cache = self._trace
        with cache.lock:
            try:
                size = path.stat().st_size
            except OSError:
                return []
            if size < cache.offset:  # replaced or truncated: read it again
                cache.offset, cache.records = 0, []
            if size > cache.offset:
                with open(path, "rb") as f:
                    f.seek(cache.offset)
                    data = f.read(size - cache.offset)
                # only whole lines: a last line without its newline (cut short by a kill) is read once the
                # next append_step has ended it, and then skipped as unreadable
                end = data.rfind(b"\n") + 1
                for line in data[:end].splitlines():
                    try:
                        cache.records.append(json.loads(line))
                    except ValueError:
                        continue  # a line cut short by a kill: the step will be written again
                cache.offset += end
            return list(cache.records)

    def append_step(self, record: dict[str, Any]) -> bool:
        """Append a step record unless one with the same `step_id` is already there (a resumed run may
        replay the node that wrote it). Returns whether it was written."""
        with self._lock:
            if any(r.get("step_id") == record["step_id"] for r in self.trace()):
                return False
            path = self.path / "trace.jsonl"
            with open(path, "ab") as f:
                # a record cut short by a kill leaves no newline: end that line first, or this record would
                # join it and both would be unreadable
                if f.tell() > 0:
                    with open(path, "rb") as r:
                        r.seek(-1, os.SEEK_END)
                        if r.read(1) != b"\n":
                            f.write(b"\n")
                f.write((json.dumps(record, default=str) + "\n").encode())
                f.flush()
                os.fsync(f.fileno())
            return True


class _TraceCache:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.offset = 0
        self.records: list[dict[str, Any]] = []


class RunStore:
    """The folder holding run directories."""

    def __init__(self, root: str | Path = "runs") -> None:
        self.root = Path(root)

    def create(self, problem_path: str, problem_source: str, config: RunSetup | dict[str, Any] | None = None) -> Run:
        self.root.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run = Run(self.root / f"{stamp}-{secrets.token_hex(3)}")
        atomic_write(run.path / "problem.py", problem_source)
        now = time.strftime("%Y-%m-%dT%H:%M:%S")
        info = RunInfo.model_validate({"id": run.id, "problem": problem_path, "created": now, "updated": now,
                                       "config": config or {}})
        atomic_write(run.path / "run.json", info.model_dump_json(indent=1))
        return run

    def open(self, run_id: str) -> Run:
        path = self.root / run_id
        if not (path / "run.json").exists():
            raise RunError(f"no run {run_id!r} in {self.root}/")
        return Run(path)

    def list(self) -> list[RunInfo]:
        if not self.root.is_dir():
            return []
        infos = []
        for p in sorted(self.root.iterdir()):
            if (p / "run.json").exists():
                try:
                    infos.append(Run(p).info())
                except RunError:
                    continue
        return infos
