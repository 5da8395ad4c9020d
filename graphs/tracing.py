"""LangSmith tracing of a run: one trace per generation.

LangChain and LangGraph trace by themselves once LangSmith's variables are set (`LANGSMITH_TRACING=true`,
`LANGSMITH_API_KEY`), one trace per call of a graph. A run calls its graph once for all its generations, so
an overnight run would be a single trace of thousands of steps. With tracing on, the driver
(`kernelwright.api`) therefore calls the graph once per generation, stopping it after each `archive`
(`GENERATION_END`, a checkpointed breakpoint it goes on from at once), and each call runs under a root run
of its own made here: "kernelwright <run> generation <g>", with the run's id, problem, generation, branch
ids, models and device as metadata. What LangGraph and LangChain record nests under it: the nodes, the
roles' model and tool calls, the verifier's span with its verdict, the archive's decision.

With the variables unset nothing here runs: no client is built and nothing is sent. The key is read from
the environment by the LangSmith client, like a provider's key by its client, and is written nowhere.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kernelwright.agents.context import RunConfig
from kernelwright.agents.llm import ROLES
from kernelwright.evaluators.result import redact

log = logging.getLogger(__name__)

GENERATION_END = ["archive"]
"""where a traced run's graph call stops: after each generation's archive step (the next call goes on from
the checkpoint, so a trace never spans two generations)"""

FLUSH_S = 30.0
"""the longest a run waits at its end for LangSmith to take its last traces (an unreachable endpoint
must not hold up the run's exit)"""

TAG = "kernelwright"


def enabled() -> bool:
    """LangSmith tracing is on in this process (`LANGSMITH_TRACING=true`, or LangChain's older names):
    decided by the same function LangChain asks, so kernelwright and LangChain never disagree."""
    from langsmith.utils import tracing_is_enabled

    return bool(tracing_is_enabled())


class RunTracing:
    """The LangSmith side of one run that this process drives: its client and its generations' traces.
    Built only when `enabled()`; one per `RunHandle`, so two runs in one process trace apart."""

    def __init__(self, run_id: str, problem: str, config: RunConfig) -> None:
        from langsmith import Client

        self.run_id = run_id
        self.problem = problem
        self.config = config
        self.client = Client()  # endpoint, key and project from the environment; no request is made yet

    def metadata(self, generation: int) -> dict[str, Any]:
        """What every trace of the run is filed under (LangSmith filters on metadata)."""
        cfg = self.config
        return {"run_id": self.run_id, "problem": self.problem, "generation": generation,
                "models": {role: cfg.model_for(role) for role in ROLES}, "device": cfg.device,
                "branches_per_generation": cfg.branches, "review": cfg.review}

    def generation(self, generation: int, archive: dict[str, Any] | None, *, resumed: bool = False) -> GenerationTrace:
        """Open the root run of one generation's graph call (`resumed`: the generation began in an
        earlier call, which paused for a review or was cut short)."""
        from langsmith.run_trees import RunTree

        name = f"{TAG} {self.run_id} generation {generation}" + (" (resumed)" if resumed else "")
        root = RunTree(name=name, run_type="chain", client=self.client,
                       inputs={"run_id": self.run_id, "generation": generation, "archive": archive or {}},
                       extra={"metadata": {**self.metadata(generation), "resumed": resumed}},
                       tags=[TAG, f"problem:{Path(self.problem).stem}"])
        try:
            root.post()
        except Exception as e:  # noqa: BLE001 - tracing must never stop a run
            log.warning("LangSmith: the trace of generation %d could not be started (%s)", generation, e)
        return GenerationTrace(root, {"run_id": self.run_id, "generation": generation})

    def flush(self, timeout: float = FLUSH_S) -> None:
        """Wait (up to `timeout` seconds) until LangSmith has taken what was traced so far."""
        try:
            self.client.flush(timeout=timeout)
        except Exception as e:  # noqa: BLE001
            log.warning("LangSmith: traces could not be flushed (%s)", e)

    def close(self) -> None:
        """Stop the client's background sending (after a last flush, bounded)."""
        try:
            self.client.close(timeout=FLUSH_S)
        except Exception as e:  # noqa: BLE001
            log.warning("LangSmith: the client could not be closed (%s)", e)


class GenerationTrace:
    """The root run of one generation's graph call. The graph runs inside `active()`, so LangGraph's own
    run of the call (and with it every node, model and tool call) becomes its child."""

    def __init__(self, root: Any, metadata: dict[str, Any]) -> None:
        self.root = root
        self._metadata = metadata
        self._ended = False

    @contextmanager
    def active(self) -> Iterator[None]:
        """Make this generation's root the parent of what LangChain and LangGraph trace in the block.

        Held only while the graph is advanced (one `next()` of its stream), never while the caller has a
        step in hand: the caller's own model calls (a chat, say) stay out of the run's trace."""
        from langsmith import tracing_context

        with tracing_context(parent=self.root, enabled=True, metadata=self._metadata):
            yield

    def end(self, steps: list[dict[str, Any]], state: dict[str, Any], error: str | None = None) -> None:
        """Close the root with what the generation did (`steps`: its records in trace.jsonl; `state`: the
        graph's state after it): the steps in short, the archive after it, why the run stopped if it did,
        and the generation's branch ids as metadata."""
        if self._ended:
            return
        self._ended = True
        outputs = {"steps": [_short(s) for s in steps], "archive": state.get("archive") or {},
                   "stop": state.get("stop")}
        generation = self._metadata["generation"]
        branches = sorted({s["step_id"] for s in steps if s.get("step_id")} | set(branch_ids(state, generation)))
        try:
            self.root.end(outputs=outputs, error=redact(error) if error else None, metadata={"branches": branches})
            self.root.patch()
        except Exception as e:  # noqa: BLE001 - tracing must never stop a run
            log.warning("LangSmith: the trace of generation %s could not be closed (%s)", generation, e)


def generation_ahead(given: Any, snapshot: Any) -> tuple[int, bool, dict[str, Any] | None]:
    """The generation a graph call will run, given what it is called with (the initial state, a review's
    `Command`, or None to go on from the checkpoint) and the checkpoint's `StateSnapshot`: (the generation,
    whether it began in an earlier call, the archive it starts from). A new run's first call runs the seed
    and generation 1; a call that starts inside a generation (a review's answer, a run cut short) finishes
    that one."""
    from langgraph.types import Command

    values: dict[str, Any] = {} if isinstance(given, dict) else dict(snapshot.values or {})
    if not values:
        return 1, False, None
    within = isinstance(given, Command) or any(n in ("branch", "archive") for n in snapshot.next or ())
    done = int(values.get("generation") or 0)
    return (done, True, values.get("archive")) if within else (done + 1, False, values.get("archive"))


def branch_ids(state: dict[str, Any], generation: int) -> list[str]:
    """The step ids (g<generation>b<branch>, as `agents.roles.branch_inputs` gives them) of the branches of
    `generation`, if the graph's state is at it (it has selected its parents)."""
    if state.get("generation") != generation:
        return []
    return [f"g{generation}b{i}" for i in range(len(state.get("parents") or []))]


def _short(step: dict[str, Any]) -> dict[str, Any]:
    """One step of the trace (trace.jsonl) as the generation's root shows it."""
    proposal = step.get("proposal") or {}
    result = step.get("result") or {}
    decision = step.get("decision") or {}
    return {"step_id": step.get("step_id"), "parent": step.get("parent"), "child": step.get("child"),
            "proposal": proposal.get("what"), "key": proposal.get("key"), "verdict": step.get("verdict"),
            "reason": result.get("reason"), "decision": decision.get("decision"),
            "speedup": decision.get("measured_speedup"), "tuned": (step.get("tuning") or {}).get("chose"),
            "tokens": step.get("tokens"),
            "cost_usd": step.get("cost_usd")}
