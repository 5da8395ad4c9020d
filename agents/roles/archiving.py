"""The archive step: the generation's children admitted, one trace record per step, the run's spend (tokens and
cost, with the first-kernel writer's), and whether to go on (`stopping.decide`); before a run ends, its best
kernel is judged again with fresh draws.
"""

from __future__ import annotations

import time
from typing import Any

from kernelwright.evaluators.profiling import ncu_unavailable_reason

from .. import playbook, stopping
from ..archive import Outcome, admit, recheck_best
from ..context import RunContext
from ..records import StepRecord
from ..stopping import FAILED, RUNNING, STOPPED, STOPPED_ON_REQUEST
from .common import State, collect_evidence, load_archive, store_archive


def provider_failure(result: State) -> str | None:
    """The model provider's failure that left a branch without a child (retries spent), in one sentence."""
    return next((u["error"] for u in (result.get("llm") or {}).values() if u.get("error_kind") == "provider"), None)


def spent_so_far(ctx: RunContext) -> dict[str, Any]:
    """Tokens and cost of every model call of the run: the steps in the trace and the seed writer's attempts."""
    tokens, cost = 0, 0.0
    for r in ctx.run.trace():
        step = StepRecord.model_validate(r)
        tokens += step.tokens
        cost += step.cost_usd
    for a in ctx.run.info().config.seed_attempts:
        tokens += a.tokens
        cost += a.cost_usd
    return {"tokens": tokens, "cost_usd": round(cost, 6)}


def _judge_again(ctx: RunContext, h: str) -> tuple[str, str]:
    """A fresh judgement of kernel `h` on the run's first device, as (verdict, detail)."""
    result = ctx.evaluations.confirm(h, ctx.config.device_for(0))
    return result.verdict, f"{result.reason}: {result.detail}"[:300]


def profile_losers(ctx: RunContext, losers: dict[str, str]) -> None:
    """Profile, with Nsight Compute, a timed child that lost (one per device and generation, `losers`), for a
    model analyst: the next prompts' history line of its step carries its longest kernel's figures (a relay model
    on level1/35_GroupNorm_ said why a structure lost was a guess without them). Only where that headline can
    exist (a model analyses, `--profile auto`, Nsight Compute can read counters) and the run goes on: a profile
    takes about a minute and a half at a real size, and the builtin reads only its parent's profile."""
    cfg = ctx.config
    if not losers or not cfg.uses_model("analyst") or cfg.profile != "auto" or cfg.on_cpu:
        return
    for device, child in losers.items():
        if device.startswith("ray:") or ncu_unavailable_reason() is None:  # on a cluster the node says why not
            collect_evidence(ctx, child, device)


def archive_step(state: State, ctx: RunContext) -> State:
    """Admit the generation's children, write one trace record per step, decide whether to go on."""
    cfg, run = ctx.config, ctx.run
    archive = load_archive(state, ctx)
    done = {s.step_id for s in archive.steps if s.step_id}
    losers: dict[str, str] = {}  # per device, the first timed child the archive did not keep as an elite
    for r in sorted(state.get("results") or [], key=lambda r: r["step_id"]):
        if r["step_id"] in done:
            continue
        key = (r.get("proposal") or {}).get("key") or "none"
        outcome = Outcome.model_validate(r["outcome"]) if r.get("outcome") else None
        rev = r.get("review") or {}
        rejected = rev.get("decision") == "reject"
        down = None if r.get("child") or rejected else provider_failure(r)
        archive, step = admit(archive, r["parent"], key, outcome, step_id=r["step_id"],
                              predicted=None if rejected else (r.get("proposal") or {}).get("predicted_speedup"),
                              no_child=(f"rejected by the reviewer: {rev.get('message') or 'no reason given'}"
                                        if rejected else f"{down} (not counted against the budget)" if down else None),
                              no_child_reason="provider_failed" if down else "reviewer_rejected")
        device = cfg.device_for(r.get("branch") or 0)
        if step.decision == "elite":
            collect_evidence(ctx, step.child_id or "", device)
        elif step.verdict == "pass" and step.measured_speedup is not None and step.child_id:
            losers.setdefault(device, step.child_id)
        playbook.remember(ctx, r, step, archive)  # a win beyond its noise band goes to the knowledge store
        used = (r.get("llm") or {}).values()
        record = StepRecord.model_validate({
            **r, "step": step.step, "decision": step.model_dump(),
            "tokens": sum(u.get("tokens", 0) for u in used),
            "cost_usd": round(sum(u.get("cost_usd", 0.0) for u in used), 6),
            "policy": cfg.model, "role_models": dict(cfg.role_models or {}),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
        run.append_step(record.model_dump(mode="json"))
    best = archive.best
    spent = spent_so_far(ctx)
    active = ctx.active_seconds()
    stop, status = stopping.decide(archive, cfg, results=state.get("results") or [], spent=spent, active_s=active,
                                   stop_requested=ctx.stop_requested)
    if stop is None:
        profile_losers(ctx, losers)
    said = stop
    if stop is not None and stop != STOPPED_ON_REQUEST and not cfg.on_cpu and best is not None:
        # the run's result is judged again before it is reported (`recheck_best`); a stop asked for is not held up
        run.set_phase("judging the best kernel again with fresh draws")
        archive, notes = recheck_best(archive, lambda h: _judge_again(ctx, h))
        best = archive.best
        said = f"{stop}; {'; '.join(notes)}" if notes else stop
    run.update(steps=len(archive.steps), tokens=spent["tokens"], cost_usd=spent["cost_usd"],
               best_kernel=best.id if best else None,
               best_speedup=best.speedup_vs_eager if best else None,
               status=RUNNING if stop is None else status, stop_reason=said,
               resumable=stop is not None and status in (STOPPED, FAILED), active_s=round(active, 3))
    return {"archive": store_archive(ctx, archive, state.get("generation", 0)), "stop": stop, "results": None}
