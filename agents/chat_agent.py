"""The chat agent of `kernelwright chat`: a person's free text goes to the run's model, which answers with
read tools over the run (steps, archive, kernels, pending reviews) and can take the same actions as the
chat commands (approve, reject, propose, steer). Every action goes through the run's review desk, recorded
as the chat's, exactly as if typed."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import StructuredTool

from kernelwright.tools.review_desk import Decision, ReviewDesk, ReviewError
from kernelwright.tools.runstore import Run

from .archive import Archive
from .context import RunConfig
from .records import StepRecord
from .proposal_review import for_coder, proposal_of

SYSTEM = """You are the assistant of a kernel engineer who steers a kernelwright run: an evolutionary loop
(analyst -> strategist -> the person's review -> coder -> verifier -> archive) that makes a GPU kernel
faster, judged by a verifier that fuzzes correctness and, on a GPU, times each candidate. Answer questions
about the run from its records (use the tools; never guess numbers), and act only when asked: approve,
reject with the person's reason, propose a change, add a steering note or ban a kind of move. Be brief and
concrete; quote measured numbers with their units.

The run now:
{facts}"""

MAX_TURNS = 8
CLIP = 6000


def _clip(text: str, n: int = CLIP) -> str:
    return text if len(text) <= n else text[:n] + f"\n… ({len(text) - n} more characters)"


class RunTools:
    """The agent's tools over one run."""

    def __init__(self, run: Run, by: str) -> None:
        self.run = run
        self.desk = ReviewDesk(run)
        self.by = by

    def _steps(self) -> list[StepRecord]:
        return [StepRecord.model_validate(r) for r in self.run.trace()]

    def config(self) -> RunConfig:
        return RunConfig.from_dict(self.run.info().config.settings)

    def facts(self) -> str:
        """The run in a few lines: what it works on, where, who plays which role, budget, steering, reviews."""
        info, cfg = self.run.info(), self.config()
        timed = "no: the CPU runs Triton's interpreter, candidates are verified but never timed" \
            if cfg.on_cpu else f"yes, on {cfg.device}" + (f" ({cfg.actors} actors of the Ray cluster {cfg.cluster})" if cfg.cluster else "")
        st = self.desk.steering()
        waiting = [p.step_id for p in self.desk.waiting()]
        return "\n".join([
            f"- run {info.id} on {info.problem}: {info.status}, {info.steps} steps; budget: {cfg.budget_words()}",
            f"- timed: {timed}",
            f"- roles: analyst {cfg.model_for('analyst')}, strategist {cfg.model_for('strategist')}, coder "
            f"{cfg.model_for('coder')}" + (" (applies knob changes NAME=VALUE only)" if cfg.model_for("coder") == "builtin"
                                          else ""),
            f"- best kernel: {(info.best_kernel or '-')[:12]}"
            + (f", {info.best_speedup:.3f}x eager" if info.best_speedup else " (not timed)"),
            "- steering in force: " + (st.render().replace("\n", "; ") if not st.empty() else "none"),
            "- waiting for the person's review: " + (", ".join(waiting) or "nothing")])

    def run_status(self) -> str:
        """The run now: status, steps of the budget, device and timing, who plays each role, best kernel,
        steering in force, steps waiting for a review."""
        return self.facts()

    def list_steps(self) -> str:
        """One line per recorded step: id, parent -> child, proposal, review, verdict, archive decision."""
        lines = [f"{s.step_id}: {s.parent[:12]} -> {(s.child or '-')[:12]} | {s.proposal.what if s.proposal else '-'}"
                 f" | review {s.review.decision if s.review else '-'} | verdict {s.verdict or '-'} | "
                 f"{s.decision.decision}: {s.decision.why}" for s in self._steps()]
        return "\n".join(lines) or "no step recorded yet"

    def read_step(self, step_id: str) -> str:
        """A step's record (diagnosis and its evidence, proposal, review, diff, verdict, timing, decision) as
        JSON; for a step waiting for review, what the reviewer is shown."""
        for s in self._steps():
            if s.step_id == step_id or str(s.step) == step_id:
                return _clip(s.model_dump_json(indent=1, exclude={"llm", "outcome"}, exclude_none=True))
        for p in self.desk.waiting():
            if p.step_id == step_id:
                return "waiting for the person's review:\n" + p.model_dump_json(indent=1, exclude={"interrupt_id"})
        return f"no step {step_id} (list_steps lists them)"

    def archive_summary(self) -> str:
        """The best kernel, the elites and the untimed verified kernels, with their measured numbers."""
        d = self.run.path / "archive"
        versions = sorted(int(p.stem) for p in d.glob("*.json") if p.stem.isdigit()) if d.is_dir() else []
        if not versions:
            return "the archive is empty (the seed has not been judged yet)"
        a = Archive.model_validate(self.run.archive(versions[-1]))
        made_by = {s.child_id: s.step_id for s in a.steps if s.child_id}
        rows = []
        for h in dict.fromkeys(a.elites + a.unmeasured):
            e = a.entries[h]
            row: dict[str, Any] = {"kernel": h[:12], "status": "elite" if h in a.elites else "verified, not timed",
                                   "made_by": made_by.get(h, "the seed" if e.parent_id is None else "-"),
                                   "parent": (e.parent_id or "-")[:12], "change": e.proposal_key or "-"}
            if e.median_ms is not None:
                row.update(median_ms=e.median_ms, speedup_vs_eager=e.speedup_vs_eager,
                           speedup_vs_compile=e.speedup_vs_compile, fraction_of_floor=e.fraction_of_floor)
            rows.append(row)
        return json.dumps({"best": a.best.id[:12] if a.best else None, "steps": len(a.steps), "kernels": rows},
                          indent=1)

    def kernel_source(self, kernel: str) -> str:
        """A kernel's source by its hash (or the hash's first characters)."""
        try:
            return _clip(self.run.kernel(self.desk.kernel(kernel)))
        except ReviewError as e:
            return str(e)

    def pending_reviews(self) -> str:
        """The proposals waiting for the person's decision (answer with approve, reject or propose)."""
        return json.dumps([p.model_dump(exclude={"interrupt_id"}) for p in self.desk.waiting()], indent=1) or "[]"

    def _decide(self, decision: Decision, step_id: str | None) -> str:
        try:
            p = self.desk.decide(step_id or None, decision)
        except ReviewError as e:
            return f"not done: {e}"
        return f"{decision.type} recorded for {p.step_id}"

    def approve(self, step_id: str = "") -> str:
        """Approve the waiting proposal (the oldest unless step_id names another). Only when the person asks."""
        return self._decide(Decision(type="approve", by=self.by), step_id)

    def reject(self, reason: str, step_id: str = "") -> str:
        """Reject the waiting proposal with the person's reason (the strategist is told)."""
        return self._decide(Decision(type="reject", message=reason, by=self.by), step_id)

    def propose(self, what: str, why: str = "", category: str = "other", key: str = "", step_id: str = "") -> str:
        """Answer the waiting review with the person's own proposal instead of the strategist's. With the
        builtin coder, name a knob and its new value (what 'NUM_WARPS 4 -> 8' or key 'NUM_WARPS=8')."""
        waiting = [p for p in self.desk.waiting() if not step_id or p.step_id == step_id]
        try:
            prop = proposal_of({"what": what, "why": why or "the reviewer's proposal", "category": category,
                                **({"key": key} if key else {})})
            if waiting:
                prop = for_coder(prop, self.run.kernel(waiting[0].parent), self.config().model_for("coder"))
        except ReviewError as e:
            return f"not done: {e}"
        return self._decide(Decision(type="respond", proposal=prop, by=self.by), step_id)

    def ban(self, kind: str) -> str:
        """Ban a kind of move (a proposal category: tiling, warps, pipelining, reduction, ...) from the next
        step on."""
        from typing import get_args

        from .schemas import Category

        if kind not in get_args(Category):
            return f"not done: name a kind of move, one of {', '.join(get_args(Category))}"
        self.desk.steer("ban", kind, by=self.by)
        return f"banned {kind}"

    def steer(self, note: str) -> str:
        """Add a standing note the strategist sees from the next step on."""
        try:
            self.desk.steer("note", note, by=self.by)
        except ReviewError as e:
            return f"not done: {e}"
        return "noted"

    def tools(self) -> list[StructuredTool]:
        return [StructuredTool.from_function(getattr(self, n)) for n in
                ("run_status", "list_steps", "read_step", "archive_summary", "kernel_source", "pending_reviews",
                 "approve", "reject", "propose", "steer", "ban")]


def ask(model: BaseChatModel, tools: RunTools, question: str, history: list[BaseMessage]) -> str:
    """One exchange: the model reads and acts through the tools until it answers in words. `history` holds
    the conversation so far and is extended in place."""
    by_name = {t.name: t for t in tools.tools()}
    bound = model.bind_tools(list(by_name.values()))
    history.append(HumanMessage(question))
    for _ in range(MAX_TURNS):
        ai = bound.invoke([SystemMessage(SYSTEM.format(facts=tools.facts())), *history])
        history.append(ai)
        if not isinstance(ai, AIMessage) or not ai.tool_calls:
            return str(ai.content) or "(no answer)"
        for call in ai.tool_calls:
            tool = by_name.get(call["name"])
            try:
                out: Any = tool.invoke(call["args"]) if tool else f"no tool {call['name']}"
            except Exception as e:  # noqa: BLE001 - a bad tool call is the model's to fix
                out = f"the tool failed: {type(e).__name__}: {e}"
            history.append(ToolMessage(content=str(out), tool_call_id=call["id"]))
    return "(the model used its tool budget without answering)"
