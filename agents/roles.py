"""The five roles as graph nodes: analyst, strategist, coder, verifier (per branch) and the archive.

Each node reads the small state, does its work through tools and the run directory, and returns a small
update. Each of the analyst, strategist and coder has two policies: the builtin one (no model) and the
language-model one (`llm.py`), chosen per role by the run's context (`model`, `role_models`).
"""

from __future__ import annotations

import difflib
import json
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
from . import llm
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


def device_for(ctx: Context, branch: int = 0) -> str:
    """The device a branch's candidates are judged on: `--device cuda:0,cuda:1` spreads the branches of a
    generation over the listed GPUs (round robin); the seed and the first branch use the first."""
    devices = [d for d in ctx.device.split(",") if d]
    return devices[branch % len(devices)]


def load_archive(state: OptimizeState | dict[str, Any], run: Run | None = None) -> Archive:
    """The archive a state refers to: `{"version": g}` names the run directory's archive after generation g
    (the full population, the step list and the failed-proposal index stay out of the checkpoints)."""
    ref = state.get("archive") or {}
    if ref.get("version") is None:
        return Archive.model_validate(ref) if ref.get("entries") else Archive()
    return Archive.model_validate((run or _run(state)).archive(ref["version"]))


def store_archive(run: Run, archive: Archive, version: int) -> dict[str, Any]:
    """Write the archive into the run directory; what goes into the graph state (a few numbers)."""
    run.put_archive(version, archive.model_dump())
    best = archive.best
    return {"version": version, "steps": len(archive.steps), "entries": len(archive.entries),
            "best": best.id if best else None}


def seed(state: OptimizeState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Verify the seed kernel and start the archive with it (skipped when resuming a seeded run)."""
    if (state.get("archive") or {}).get("version") is not None:
        return {}
    run = _run(state)
    ctx = runtime.context
    h = run.info().config.get("seed_kernel")
    if h is None:
        h = _write_seed(run, ctx)
        if h is None:
            errors = [a["error"] for a in run.info().config.get("seed_attempts", []) if a.get("error")]
            why = next((e for e in errors if "provider failed" in e),
                       "the model wrote no kernel that passes the verifier from the reference")
            run.update(status="failed", stop_reason=why)
            return {"stop": why, "archive": {}}
    h, result = evaluate(run, run.kernel(h), device_for(ctx), ctx.precision, ctx.trials)
    if result["verdict"] == "error":
        run.update(status="failed", stop_reason=f"the evaluator could not judge the seed kernel: {result['reason']}: "
                                                f"{result['detail']}")
        return {"stop": f"the evaluator could not judge the seed kernel ({result['reason']})", "archive": {}}
    if result["verdict"] != "pass":
        run.update(status="failed", stop_reason=f"the seed kernel is rejected: {result['reason']}: {result['detail']}")
        return {"stop": f"the seed kernel is rejected ({result['reason']})", "archive": {}}
    archive = seed_archive(Archive(), outcome_of(h, result))
    run.update(status="running", best_kernel=h, best_speedup=(result.get("timing") or {}).get("speedup_vs_eager"))
    return {"archive": store_archive(run, archive, 0), "generation": 0}


def _write_seed(run: Run, ctx: Context) -> str | None:
    """No seed kernel was given: the coder's model writes `branches` candidates from the reference (one shot
    each); the best verified one seeds the archive. Attempts, usage and transcripts go to run.json/config."""
    spec = model_spec(ctx, "coder")
    attempts: list[dict[str, Any]] = []
    best: tuple[float, str] | None = None
    for k in range(max(1, ctx.branches)):
        usage = llm.Usage(model=spec)
        transcript: list[dict[str, Any]] = []
        try:
            src, transcript = llm.write(llm.chat_model(spec, ctx.base_url), run.problem_source(),
                                        _quick_check(run, ctx), usage=usage)
            error = None if src else "no kernel that passes the quick check"
        except (llm.ProviderError, llm.ModelError) as e:
            src, error = None, str(e)
        path = run.put_blob("transcripts", f"seed-{k}.json", json.dumps(transcript, indent=1, default=str))
        attempt: dict[str, Any] = {**usage.record(), "transcript": str(path.relative_to(run.path)), "error": error}
        if src is not None:
            h, result = evaluate(run, src, device_for(ctx, k), ctx.precision, ctx.trials)
            attempt.update(kernel=h, verdict=result["verdict"], reason=result["reason"])
            if result["verdict"] == "pass":
                score = (result.get("timing") or {}).get("speedup_vs_eager") or 0.0
                if best is None or score > best[0]:
                    best = (score, h)
        attempts.append(attempt)
        if error and "provider failed" in error:
            break
    config = run.info().config
    run.update(config={**config, "seed_kernel": best[1] if best else None, "seed_written_by": spec,
                       "seed_attempts": attempts})
    return best[1] if best else None


def select(state: OptimizeState, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = runtime.context
    archive = load_archive(state)
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


def lineage_history(archive: Archive, kernel: str) -> list[dict[str, Any]]:
    """The steps taken from kernels on this one's lineage, oldest first (for the LLM strategist)."""
    on_line = set(lineage(archive, kernel))
    return [{"parent": s.parent_id[:12], "proposal": s.proposal_key, "verdict": s.verdict, "reason": s.reason,
             "delta": s.delta, "decision": s.decision} for s in archive.steps if s.parent_id in on_line][-20:]


# -- the language-model policies --------------------------------------------------------------------------


def model_spec(ctx: Context, role: str) -> str:
    return (ctx.role_models or {}).get(role) or ctx.model


def _uses_model(ctx: Context, role: str) -> bool:
    return model_spec(ctx, role) != "builtin"


def _llm_record(state: BranchState, run: Run, role: str, usage: llm.Usage, transcript: list[dict[str, Any]],
                error: str | None = None) -> dict[str, Any]:
    """The branch's `llm` field with this role's record added; the transcript goes to the run directory."""
    path = run.put_blob("transcripts", f"{state['step_id']}-{role}.json", json.dumps(transcript, indent=1, default=str))
    rec = {**usage.record(), "transcript": str(path.relative_to(run.path))}
    if error:
        rec["error"] = error
    return {**(state.get("llm") or {}), role: rec}


def _llm_analyst(state: BranchState, ctx: Context, run: Run) -> dict[str, Any]:
    result = run.eval(state["parent"]) or {}
    spec = model_spec(ctx, "analyst")
    usage, transcript = llm.Usage(model=spec), []
    try:
        d = llm.analyse(llm.chat_model(spec, ctx.base_url), problem=run.problem_source(),
                        parent=run.kernel(state["parent"]), evaluation=llm.describe_eval(result),
                        profile=llm.describe_profile(result), usage=usage, transcript=transcript)
        error = None
    except (llm.ProviderError, llm.ModelError) as e:
        # the builtin reading keeps the branch going; the failure is in the trace
        d, error = diagnose(result.get("timing"), result.get("kernels") or []), str(e)
    return {"diagnosis": d.model_dump(), "llm": _llm_record(state, run, "analyst", usage, transcript, error)}


def _llm_strategist(state: BranchState, ctx: Context, run: Run) -> dict[str, Any]:
    spec = model_spec(ctx, "strategist")
    usage, transcript = llm.Usage(model=spec), []
    history = "\n".join(json.dumps(h) for h in state.get("history") or [])
    evaluation = llm.describe_eval(run.eval(state["parent"]) or {})
    try:
        p = llm.strategise(llm.chat_model(spec, ctx.base_url), problem=run.problem_source(),
                           parent=run.kernel(state["parent"]), evaluation=evaluation,
                           diagnosis=Diagnosis.model_validate(state["diagnosis"]), history=history,
                           failed=list(state.get("failed") or []), usage=usage, transcript=transcript,
                           sibling_rank=state.get("sibling_rank") or 0)
        return {"proposal": p.model_dump(), "llm": _llm_record(state, run, "strategist", usage, transcript)}
    except (llm.ProviderError, llm.ModelError) as e:
        return {"proposal": None, "llm": _llm_record(state, run, "strategist", usage, transcript, str(e))}


def _quick_check(run: Run, ctx: Context, branch: int = 0) -> llm.QuickCheck:
    """On the CPU the quick check is the real verifier (its verdict is cached, so the verifier reuses it);
    on a GPU it is the syntax check only, so no time is spent timing drafts."""
    device = device_for(ctx, branch)

    def check(source: str) -> tuple[bool, str]:
        if device != "cpu":
            return llm.syntax_check(source)
        _, result = evaluate(run, source, device, ctx.precision, ctx.trials)
        return result["verdict"] == "pass", f"{result['reason']}: {result.get('detail') or ''}"[:2000]

    return check


def _llm_coder(state: BranchState, ctx: Context, run: Run, parent_src: str, proposal: Proposal) -> dict[str, Any]:
    spec = model_spec(ctx, "coder")
    usage = llm.Usage(model=spec)
    transcript: list[dict[str, Any]] = []
    try:
        child_src, transcript = llm.code(llm.chat_model(spec, ctx.base_url), parent_src, proposal,
                                         _quick_check(run, ctx, state.get("branch") or 0),
                                         problem=run.problem_source(),
                                         diagnosis=Diagnosis.model_validate(state["diagnosis"]), usage=usage)
        error = None if child_src else "the coder produced no passing change"
    except (llm.ProviderError, llm.ModelError) as e:
        child_src, error = None, str(e)
    rec = _llm_record(state, run, "coder", usage, transcript, error)
    if child_src is None:
        return {"child": None, "coder": {"policy": spec, "error": error}, "llm": rec}
    diff = "".join(difflib.unified_diff(parent_src.splitlines(keepends=True), child_src.splitlines(keepends=True),
                                        f"{state['parent']}.py", "child.py"))
    return {"child": run.put_kernel(child_src), "coder": {"policy": spec, "diff": diff}, "llm": rec}


# -- one branch -------------------------------------------------------------------------------------------


def analyst(state: BranchState, runtime: Runtime[Context]) -> dict[str, Any]:
    run = _run(state)
    if _uses_model(runtime.context, "analyst"):
        return _llm_analyst(state, runtime.context, run)
    result = run.eval(state["parent"]) or {}
    d = diagnose(result.get("timing"), result.get("kernels") or [])
    return {"diagnosis": d.model_dump()}


def strategist(state: BranchState, runtime: Runtime[Context]) -> dict[str, Any]:
    run = _run(state)
    if _uses_model(runtime.context, "strategist"):
        return _llm_strategist(state, runtime.context, run)
    rng = random.Random(f"{runtime.context.seed}/{state['step_id']}")
    p = propose(run.kernel(state["parent"]), Diagnosis.model_validate(state["diagnosis"]),
                state.get("lineage_gains") or {}, set(state.get("failed") or []), rng,
                rank=state.get("sibling_rank") or 0)
    return {"proposal": p.model_dump() if p else None}


def coder(state: BranchState, runtime: Runtime[Context]) -> dict[str, Any]:
    run = _run(state)
    if not state.get("proposal"):
        return {"child": None, "coder": {"note": "no proposal: every move from this parent was tried"}}
    parent_src = run.kernel(state["parent"])
    proposal = Proposal.model_validate(state["proposal"])
    if _uses_model(runtime.context, "coder"):
        return _llm_coder(state, runtime.context, run, parent_src, proposal)
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
            "coder": state.get("coder") or {}, "child": state.get("child"), "llm": state.get("llm") or {}}
    if not state.get("child"):
        return {"results": [{**base, "verdict": None}]}
    t0 = time.monotonic()
    h, result = evaluate(run, run.kernel(state["child"]), device_for(ctx, state.get("branch") or 0), ctx.precision,
                         ctx.trials)
    summary = {k: result.get(k) for k in ("verdict", "reason", "detail", "max_rel_error", "timing",
                                           "timing_unavailable", "kernel_coverage")}
    # verdict "error": the evaluator failed, not the candidate; the step says so and the kernel is not cached
    return {"results": [{**base, "verdict": result["verdict"], "result": summary, "verify_s": time.monotonic() - t0,
                         "evaluator_failure": result["verdict"] == "error",
                         "outcome": outcome_of(h, result).model_dump()}]}


# -- the archive ------------------------------------------------------------------------------------------


def spent_so_far(run: Run) -> dict[str, Any]:
    """Tokens and cost of every model call of the run: the steps in the trace and the seed writer's attempts."""
    tokens, cost = 0, 0.0
    for r in run.trace():
        tokens += int(r.get("tokens") or 0)
        cost += float(r.get("cost_usd") or 0.0)
    for a in run.info().config.get("seed_attempts", []):
        tokens += int(a.get("tokens") or 0)
        cost += float(a.get("cost_usd") or 0.0)
    return {"tokens": tokens, "cost_usd": round(cost, 6)}


def archive_node(state: OptimizeState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Admit the generation's children, write one trace record per step, decide whether to go on."""
    ctx = runtime.context
    run = _run(state)
    archive = load_archive(state, run)
    done = {s.step_id for s in archive.steps if getattr(s, "step_id", None)}
    for r in sorted(state.get("results") or [], key=lambda r: r["step_id"]):
        if r["step_id"] in done:
            continue
        key = (r.get("proposal") or {}).get("key") or "none"
        outcome = Outcome.model_validate(r["outcome"]) if r.get("outcome") else None
        archive, step = admit(archive, r["parent"], key, outcome, step_id=r["step_id"])
        used = (r.get("llm") or {}).values()
        run.append_step({**r, "step": step.step, "decision": step.model_dump(),
                         "tokens": sum(u.get("tokens", 0) for u in used),
                         "cost_usd": round(sum(u.get("cost_usd", 0.0) for u in used), 6),
                         "policy": ctx.model, "role_models": dict(ctx.role_models or {}),
                         "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
    best = archive.best
    stop = None
    spent = spent_so_far(run)
    results = state.get("results") or []
    failures = [u["error"] for r in results for u in (r.get("llm") or {}).values()
                if "provider failed" in (u.get("error") or "")]
    if results and failures and all(not r.get("child") for r in results):
        stop = failures[0]  # the provider is down for good (retries spent): say so rather than spin
    elif len(archive.steps) >= ctx.iterations:
        stop = f"iteration budget reached ({len(archive.steps)} steps)"
    elif ctx.time_budget_s is not None and time.time() - run.created_at() >= ctx.time_budget_s:
        stop = f"time budget reached ({ctx.time_budget_s:.0f} s)"
    elif ctx.token_budget is not None and spent["tokens"] >= ctx.token_budget:
        stop = f"token budget reached ({spent['tokens']} of {ctx.token_budget} tokens)"
    elif ctx.cost_budget_usd is not None and spent["cost_usd"] >= ctx.cost_budget_usd:
        stop = f"cost budget reached (${spent['cost_usd']:.4f} of ${ctx.cost_budget_usd:.4f})"
    else:
        stop = stop_reason(archive, plateau_steps=ctx.plateau_steps, roofline_target=ctx.roofline_target)
        # a model that proposed nothing this time may next time (each such step still spends the budget);
        # the builtin catalog proposing nothing means it is exhausted
        if stop is None and results and all(not r.get("proposal") and "strategist" not in (r.get("llm") or {})
                                            for r in results):
            stop = "search exhausted: every move from every parent has been tried"
        if stop is None and _interrupted():
            stop = "interrupted (Ctrl-C): the step in flight was finished and checkpointed"
    run.update(steps=len(archive.steps), tokens=spent["tokens"], cost_usd=spent["cost_usd"],
               best_kernel=best.id if best else None,
               best_speedup=best.speedup_vs_eager if best else None,
               status="running" if stop is None else "finished", stop_reason=stop)
    return {"archive": store_archive(run, archive, state.get("generation", 0)), "stop": stop, "results": None}


_INTERRUPT = {"flag": False}


def request_stop() -> None:
    """Ask the run to stop after the generation in flight (the CLI's Ctrl-C handler calls this)."""
    _INTERRUPT["flag"] = True


def reset_stop() -> None:
    _INTERRUPT["flag"] = False


def _interrupted() -> bool:
    return _INTERRUPT["flag"]
