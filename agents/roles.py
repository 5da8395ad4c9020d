"""The five roles as graph nodes: analyst, strategist, coder, verifier (per branch) and the archive.

Each node reads the small state, does its work through tools and the run directory, and returns a small
update. This version has the builtin (no-model) policy for every role; the LLM policies plug in here.
"""

from __future__ import annotations

import difflib
import logging
import random
import time
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from kernelwright.graphs.state import BranchState, Context, OptimizeState
from kernelwright.runstore import Run
from kernelwright.tools.evaluation import evaluate

from .archive import Archive, Outcome, admit, select_parents, stop_reason
from .archive import seed as seed_archive
from .builtin import diagnose, move_for, move_kind, propose
from .moves import Move, apply, category_of, knobs
from .schemas import Diagnosis, Proposal

log = logging.getLogger(__name__)


def _run(state: dict[str, Any]) -> Run:
    return Run(Path(state["run_dir"]))


def outcome_of(h: str, result: dict[str, Any]) -> Outcome:
    t = result.get("timing") or {}
    return Outcome(child_id=h, verdict=result["verdict"], reason=result["reason"], median_ms=t.get("median_ms"),
                   speedup_vs_eager=t.get("speedup_vs_eager"), speedup_vs_compile=t.get("speedup_vs_compile"),
                   fraction_of_floor=t.get("fraction_of_floor"), noise_band=t.get("noise_band") or 0.0,
                   suspect=t.get("suspect") or [], kernels=result.get("kernels") or [], bound=t.get("bound"))


# -- the outer loop ---------------------------------------------------------------------------------------


def seed(state: OptimizeState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Verify the seed kernel and start the archive with it (skipped when resuming a seeded run)."""
    if state.get("archive", {}).get("entries"):
        return {}
    run = _run(state)
    ctx = runtime.context
    h = run.info().config["seed_kernel"]
    h, result = evaluate(run, run.kernel(h), ctx.device, ctx.precision, ctx.trials)
    if result["verdict"] != "pass":
        run.update(status="failed", stop_reason=f"the seed kernel is rejected: {result['reason']}: {result['detail']}")
        return {"stop": f"the seed kernel is rejected ({result['reason']})", "archive": Archive().model_dump()}
    archive = seed_archive(Archive(), outcome_of(h, result))
    run.update(status="running", best_kernel=h, best_speedup=(result.get("timing") or {}).get("speedup_vs_eager"))
    return {"archive": archive.model_dump(), "generation": 0}


def select(state: OptimizeState, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = runtime.context
    archive = Archive.model_validate(state["archive"])
    gen = state.get("generation", 0) + 1
    rng = random.Random(f"{ctx.seed}/{gen}")
    left = ctx.iterations - len(archive.steps)
    parents = select_parents(archive, max(1, min(ctx.branches, left)), rng, ctx.explore)
    return {"parents": parents, "generation": gen, "results": None}


def lineage(archive: Archive, kernel: str) -> list[str]:
    chain = []
    while kernel and kernel in archive.entries and kernel not in chain:
        chain.append(kernel)
        kernel = archive.entries[kernel].parent_id or ""
    return chain


def lineage_gains(archive: Archive, kernel: str, run: Run) -> dict[str, list[float]]:
    """Measured gains by move kind over the steps whose parent lies on this kernel's lineage."""
    on_line = set(lineage(archive, kernel))
    gains: dict[str, list[float]] = {}
    for step in archive.steps:
        if step.parent_id not in on_line or step.delta is None or "=" not in step.proposal_key:
            continue
        knob, new = step.proposal_key.split("=", 1)
        old = knobs(run.kernel(step.parent_id)).get(knob)
        if old is None or not new.lstrip("-").isdigit():
            continue
        gains.setdefault(move_kind(Move(knob, old.value, int(new), category_of(knob))), []).append(step.delta)
    return gains


# -- one branch -------------------------------------------------------------------------------------------


def analyst(state: BranchState, runtime: Runtime[Context]) -> dict[str, Any]:
    run = _run(state)
    result = run.eval(state["parent"]) or {}
    d = diagnose(result.get("timing"), result.get("kernels") or [])
    return {"diagnosis": d.model_dump()}


def strategist(state: BranchState, runtime: Runtime[Context]) -> dict[str, Any]:
    run = _run(state)
    rng = random.Random(f"{runtime.context.seed}/{state['step_id']}")
    p = propose(run.kernel(state["parent"]), Diagnosis.model_validate(state["diagnosis"]),
                state.get("lineage_gains") or {}, set(state.get("failed") or []), rng)
    return {"proposal": p.model_dump() if p else None}


def coder(state: BranchState, runtime: Runtime[Context]) -> dict[str, Any]:
    run = _run(state)
    if not state.get("proposal"):
        return {"child": None, "coder": {"note": "no proposal: every move from this parent was tried"}}
    parent_src = run.kernel(state["parent"])
    proposal = Proposal.model_validate(state["proposal"])
    try:
        child_src = apply(parent_src, move_for(parent_src, proposal))
    except (KeyError, ValueError) as e:
        return {"child": None, "coder": {"error": str(e)}}
    diff = "".join(difflib.unified_diff(parent_src.splitlines(keepends=True), child_src.splitlines(keepends=True),
                                        f"{state['parent']}.py", "child.py"))
    return {"child": run.put_kernel(child_src), "coder": {"policy": "builtin", "diff": diff}}


def verifier(state: BranchState, runtime: Runtime[Context]) -> dict[str, Any]:
    run = _run(state)
    ctx = runtime.context
    base = {"step_id": state["step_id"], "generation": state["generation"], "branch": state["branch"],
            "parent": state["parent"], "diagnosis": state.get("diagnosis"), "proposal": state.get("proposal"),
            "coder": state.get("coder") or {}, "child": state.get("child")}
    if not state.get("child"):
        return {"results": [{**base, "verdict": None}]}
    t0 = time.monotonic()
    h, result = evaluate(run, run.kernel(state["child"]), ctx.device, ctx.precision, ctx.trials)
    summary = {k: result.get(k) for k in ("verdict", "reason", "detail", "max_rel_error", "timing",
                                           "timing_unavailable", "kernel_coverage")}
    return {"results": [{**base, "verdict": result["verdict"], "result": summary, "verify_s": time.monotonic() - t0,
                         "outcome": outcome_of(h, result).model_dump()}]}


# -- the archive ------------------------------------------------------------------------------------------


def archive_node(state: OptimizeState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Admit the generation's children, write one trace record per step, decide whether to go on."""
    ctx = runtime.context
    run = _run(state)
    archive = Archive.model_validate(state["archive"])
    done = {s.step_id for s in archive.steps if getattr(s, "step_id", None)}
    for r in sorted(state.get("results") or [], key=lambda r: r["step_id"]):
        if r["step_id"] in done:
            continue
        key = (r.get("proposal") or {}).get("key") or "none"
        outcome = Outcome.model_validate(r["outcome"]) if r.get("outcome") else None
        archive, step = admit(archive, r["parent"], key, outcome, step_id=r["step_id"])
        run.append_step({**r, "step": step.step, "decision": step.model_dump(), "tokens": 0, "cost_usd": 0.0,
                         "policy": ctx.model, "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
    best = archive.best
    stop = None
    results = state.get("results") or []
    if len(archive.steps) >= ctx.iterations:
        stop = f"iteration budget reached ({len(archive.steps)} steps)"
    elif ctx.time_budget_s is not None and time.time() - run.created_at() >= ctx.time_budget_s:
        stop = f"time budget reached ({ctx.time_budget_s:.0f} s)"
    else:
        stop = stop_reason(archive, plateau_steps=ctx.plateau_steps, roofline_target=ctx.roofline_target)
        if stop is None and results and all(not r.get("proposal") for r in results):
            stop = "search exhausted: every move from every parent has been tried"
        if stop is None and _interrupted():
            stop = "interrupted (Ctrl-C): the step in flight was finished and checkpointed"
    run.update(steps=len(archive.steps), best_kernel=best.id if best else None,
               best_speedup=best.speedup_vs_eager if best else None,
               status="running" if stop is None else "finished", stop_reason=stop)
    return {"archive": archive.model_dump(), "stop": stop, "results": None}


_INTERRUPT = {"flag": False}


def request_stop() -> None:
    """Ask the run to stop after the generation in flight (the CLI's Ctrl-C handler calls this)."""
    _INTERRUPT["flag"] = True


def reset_stop() -> None:
    _INTERRUPT["flag"] = False


def _interrupted() -> bool:
    return _INTERRUPT["flag"]
