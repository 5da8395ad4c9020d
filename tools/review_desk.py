"""The review desk of a run: how people reach a running loop, through files in its run directory.

Whoever drives a run (`kernelwright optimize --review proposals`, a chat session, the MCP server) and
whoever reviews it (the same chat, `kernelwright chat --attach`, an MCP client) may be different
processes, started and killed at different times; they meet here:

    review/pending.json             proposals waiting for a decision (written by the driver)
    review/decisions/<step>.json    one decision per waiting step (written by a reviewer, read once)
    review/driver.json              the process driving the run now (pid, host, since)
    review/stop                     a request to stop after the step in flight
    steering.jsonl                  standing notes, pinned parents and banned kinds of move, in order

Every write is atomic (a temporary file renamed into place), so a reader never sees half a record, and a
decision survives the death of both processes: the driver that resumes the run finds it.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .runstore import Run, RunError, atomic_write

DecisionType = Literal["approve", "edit", "reject", "respond"]
DECISIONS: tuple[DecisionType, ...] = ("approve", "edit", "reject", "respond")
ACTION = "propose_change"
"""The action a proposal review is about, in LangGraph's human-in-the-loop schema (`action_requests`)."""

SteerKind = Literal["note", "pin", "ban", "unpin", "unban", "clear"]


class ReviewError(Exception):
    """A decision or steering request that cannot be taken; the message is one sentence."""


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def who(channel: str) -> str:
    """Who decided, as the trace records it: the channel and the person's login on this host."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return f"{channel}:{user}@{socket.gethostname()}"


class Decision(BaseModel):
    """A reviewer's answer to one paused step."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    type: DecisionType
    """approve: go on with the proposal; edit: go on with `proposal` instead; reject: drop the proposal
    (`message` says why, and the strategist is told); respond: the person plays a role, giving the proposal
    (`proposal`) or the child kernel itself (`kernel`)"""
    proposal: dict[str, Any] | None = None
    """the proposal to use (edit, respond): category, what, why, predicted_speedup, key"""
    kernel: str | None = None
    """the child kernel's source (respond): the coder is skipped and this is verified as the child"""
    message: str | None = None
    """why (reject), or a note kept with the decision"""
    by: str = "unknown"
    """who decided: channel and person (chat:alice@host, mcp:..., langgraph)"""
    at: str = Field(default_factory=now)
    """when the decision was made (local time)"""


class PendingReview(BaseModel):
    """One step paused after its strategist, waiting for a decision."""

    model_config = ConfigDict(extra="ignore")

    step_id: str
    interrupt_id: str | None = None
    """LangGraph's id of the interrupt (the driver resumes the graph with it)"""
    generation: int = 0
    branch: int = 0
    parent: str = ""
    parent_label: str = ""
    diagnosis: dict[str, Any] | None = None
    proposal: dict[str, Any] | None = None
    no_proposal: str | None = None
    """why there is no proposal to review (the builtin catalog is exhausted, the model failed)"""
    allowed_decisions: list[DecisionType] = Field(default_factory=lambda: list(DECISIONS))
    since: str = Field(default_factory=now)


class SteerEntry(BaseModel):
    """One steering request, in the order given."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    kind: SteerKind
    """note: a standing instruction to the strategist; pin: every branch starts from this kernel; ban: no
    proposal of this category (or key prefix); unpin, unban: take one back; clear: drop every standing note"""
    text: str = ""
    """the note, the kernel hash (or its prefix) to pin, or the category to ban"""
    by: str = "unknown"
    at: str = Field(default_factory=now)


class Steering(BaseModel):
    """What is in force now, folded from the steering log."""

    notes: list[str] = Field(default_factory=list)
    pinned: str | None = None
    banned: list[str] = Field(default_factory=list)

    def empty(self) -> bool:
        return not (self.notes or self.pinned or self.banned)

    def render(self) -> str:
        """For the strategist's prompt."""
        lines = [f"- {n}" for n in self.notes]
        if self.banned:
            lines.append(f"- do not propose changes of these kinds: {', '.join(self.banned)}")
        if self.pinned:
            lines.append(f"- every branch starts from kernel {self.pinned[:12]} (pinned by the reviewer)")
        return "\n".join(lines)


def fold(entries: list[SteerEntry]) -> Steering:
    s = Steering()
    for e in entries:
        if e.kind == "note":
            s.notes.append(e.text)
        elif e.kind == "clear":
            s.notes = []
        elif e.kind == "pin":
            s.pinned = e.text
        elif e.kind == "unpin":
            s.pinned = None
        elif e.kind == "ban" and e.text not in s.banned:
            s.banned.append(e.text)
        elif e.kind == "unban":
            s.banned = [b for b in s.banned if b != e.text]
    return s


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped) is not driving anything
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


class ReviewDesk:
    """The review files of one run (see the module's docstring)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.dir = run.path / "review"

    # -- pending reviews (the driver writes, reviewers read) --------------------------------------------

    def post(self, pending: list[PendingReview]) -> None:
        _write(self.dir / "pending.json", json.dumps([p.model_dump() for p in pending], indent=1))

    def pending(self) -> list[PendingReview]:
        try:
            data = json.loads((self.dir / "pending.json").read_text())
        except (OSError, ValueError):
            return []
        out = []
        for item in data if isinstance(data, list) else []:
            try:
                out.append(PendingReview.model_validate(item))
            except ValidationError:
                continue
        return out

    def waiting(self) -> list[PendingReview]:
        """Pending reviews that have no decision yet."""
        decided = self.decisions()
        return [p for p in self.pending() if p.step_id not in decided]

    def clear(self, step_ids: list[str]) -> None:
        """The driver has resumed these steps: drop them from the pending list and their decisions."""
        left = [p for p in self.pending() if p.step_id not in step_ids]
        self.post(left)
        for s in step_ids:
            (self.dir / "decisions" / f"{s}.json").unlink(missing_ok=True)

    # -- decisions (a reviewer writes, the driver reads) ------------------------------------------------

    def decide(self, step_id: str | None, decision: Decision) -> PendingReview:
        """Record a decision for a waiting step (the only one when `step_id` is None). ReviewError when
        nothing waits, the step is not waiting, or the decision is not allowed or incomplete."""
        waiting = self.waiting()
        if not waiting:
            raise ReviewError("no proposal is waiting for a review")
        if step_id is None:
            target = waiting[0]
        else:
            target = next((p for p in waiting if p.step_id == step_id), None)
            if target is None:
                raise ReviewError(f"step {step_id} is not waiting for a review (waiting: "
                                  f"{', '.join(p.step_id for p in waiting)})")
        check(decision, target)
        _write(self.dir / "decisions" / f"{target.step_id}.json", decision.model_dump_json(indent=1))
        return target

    def decisions(self) -> dict[str, Decision]:
        out: dict[str, Decision] = {}
        d = self.dir / "decisions"
        for p in sorted(d.glob("*.json")) if d.is_dir() else []:
            try:
                out[p.stem] = Decision.model_validate_json(p.read_text())
            except (OSError, ValidationError):
                continue
        return out

    # -- steering ---------------------------------------------------------------------------------------

    def steer(self, kind: SteerKind, text: str = "", by: str = "unknown") -> SteerEntry:
        text = text.strip()
        if kind in ("note", "pin", "ban", "unban") and not text:
            raise ReviewError(f"{kind} needs a text: " + {"note": "the instruction to the strategist",
                                                         "pin": "the kernel hash (or its first characters)",
                                                         "ban": "the kind of move (a proposal category)",
                                                         "unban": "the kind of move"}[kind])
        if kind == "pin":
            text = self.kernel(text)
        entry = SteerEntry(kind=kind, text=text, by=by)
        self.run.path.joinpath("steering.jsonl").open("a").write(entry.model_dump_json() + "\n")
        return entry

    def kernel(self, prefix: str) -> str:
        """The one kernel of the run whose hash starts with `prefix`."""
        try:
            return self.run.find_kernel(prefix)
        except RunError as e:
            raise ReviewError(f"pin {prefix}: {e}") from None

    def steering_log(self) -> list[SteerEntry]:
        path = self.run.path / "steering.jsonl"
        out = []
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return []
        for line in lines:
            try:
                out.append(SteerEntry.model_validate_json(line))
            except ValidationError:
                continue  # a line cut short by a kill
        return out

    def steering(self) -> Steering:
        return fold(self.steering_log())

    # -- stop requests and the driver -------------------------------------------------------------------

    def request_stop(self, by: str = "unknown") -> None:
        _write(self.dir / "stop", json.dumps({"by": by, "at": now()}))

    def stop_requested(self) -> bool:
        return (self.dir / "stop").exists()

    def clear_stop(self) -> None:
        (self.dir / "stop").unlink(missing_ok=True)

    def claim(self, what: str) -> None:
        """This process drives the run now."""
        _write(self.dir / "driver.json", json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                     "what": what, "since": now()}))

    def release(self) -> None:
        d = self.driver()
        if d and d.get("pid") == os.getpid():
            (self.dir / "driver.json").unlink(missing_ok=True)

    def driver(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.dir / "driver.json").read_text())
        except (OSError, ValueError):
            return None

    def driver_gone(self) -> bool:
        """The run names a driver on this host whose process is dead (killed, say, by SIGKILL or the OOM killer,
        which leave no word in run.json); a run served by `langgraph dev` names none, and a driver on another host
        is trusted as live."""
        d = self.driver()
        if not d or d.get("host") != socket.gethostname():
            return False
        return not _alive(int(d.get("pid", 0)))

    def driven_elsewhere(self) -> bool:
        """Another live process on this host drives the run (a driver on another host is trusted as live)."""
        d = self.driver()
        if not d or d.get("pid") == os.getpid():
            return False
        if d.get("host") != socket.gethostname():
            return True
        return _alive(int(d.get("pid", 0)))


def check(decision: Decision, pending: PendingReview) -> None:
    """ReviewError unless the decision can be applied to this pending step."""
    if decision.type not in pending.allowed_decisions:
        raise ReviewError(f"{decision.type} is not allowed here (allowed: {', '.join(pending.allowed_decisions)})")
    if decision.type == "edit" and not decision.proposal:
        raise ReviewError("edit needs the edited proposal")
    if decision.type == "respond" and not (decision.proposal or decision.kernel):
        raise ReviewError("respond needs a proposal of your own or the child kernel's source")
    if decision.type == "respond" and decision.proposal and decision.kernel:
        raise ReviewError("respond with a proposal or a kernel, not both")
    if decision.type == "approve" and pending.proposal is None:
        raise ReviewError("there is no proposal to approve: respond with one, or reject to skip the step")
