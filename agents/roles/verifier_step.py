"""The verifier step: the child judged by the evaluation service; a verified structural child's knobs tuned by the
builtin before the archive judges it; a child faster than its parent judged again with fresh draws, so that a
fragile kernel is not called better. Never a model: the verdict is the evaluator's.
"""

from __future__ import annotations

import time
from typing import Any

from kernelwright.evaluators import EvalResult

from ..context import RunContext
from ..schemas import STRUCTURAL
from ..tuning import NOT_ON_CPU, TuneRecord, tune
from .common import State, outcome_of


def verifier(state: State, ctx: RunContext) -> State:
    run = ctx.run
    base = {"step_id": state["step_id"], "generation": state["generation"], "branch": state["branch"],
            "parent": state["parent"], "diagnosis": state.get("diagnosis"), "proposal": state.get("proposal"),
            "coder": state.get("coder") or {}, "child": state.get("child"), "llm": state.get("llm") or {},
            **({"review": state["review"]} if state.get("review") else {}),
            **({"steering": state["steering"]} if state.get("steering") else {})}
    if not state.get("child"):
        return {"results": [{**base, "verdict": None}]}
    t0 = time.monotonic()
    h, result = ctx.evaluations.evaluate(run.kernel(state["child"]), ctx.config.device_for(state.get("branch") or 0))
    verify_s = time.monotonic() - t0
    tuning: dict[str, Any] = {}
    if (state.get("proposal") or {}).get("category") in STRUCTURAL and result.verdict == "pass":
        h, result, tuning = _tune_child(state, ctx, h, result)
    confirmation: dict[str, Any] = {}
    if _faster_than_parent(ctx, state["parent"], result):
        second = ctx.evaluations.confirm(h, ctx.config.device_for(state.get("branch") or 0))
        confirmation = {"confirmation": second.model_dump(mode="json", include={"verdict", "reason", "detail",
                                                                                 "max_rel_error"})}
        if second.verdict == "fail":  # the step's verdict: fragile, not faster
            result = second
    summary = result.model_dump(mode="json", include={"verdict", "reason", "detail", "max_rel_error", "timing",
                                                      "timing_unavailable", "kernel_coverage"})
    # verdict "error": the evaluator failed, not the candidate; the step says so and the kernel is not cached
    return {"results": [{**base, "child": h, "verdict": result.verdict, "result": summary, "verify_s": verify_s,
                         "evaluator_failure": result.verdict == "error", **tuning, **confirmation,
                         "outcome": outcome_of(h, result).model_dump()}]}


def _faster_than_parent(ctx: RunContext, parent: str, result: EvalResult) -> bool:
    """Whether a verified child ran faster than its parent, so that the archive may call it better: such a child is
    judged a second time with fresh draws first (`Evaluations.confirm`). Untimed children (the CPU) are not."""
    if result.verdict != "pass" or result.timing is None:
        return False
    judged = ctx.evaluations.cached(parent)
    return judged is None or judged.timing is None or result.timing.median_ms < judged.timing.median_ms


def _tune_child(state: State, ctx: RunContext, h: str, result: EvalResult) -> tuple[str, EvalResult, dict[str, Any]]:
    """Structure, then tuning: a verified structural child's knobs swept by the builtin (`tuning.tune`) through
    the evaluation service, so that the archive judges the structure at its best block sizes, not at whatever the
    model wrote. Returns the step's child (the winning variant, or the child as written), its verdict, and the
    step result's `tuning` entry. On the CPU nothing is timed: the record says so and nothing runs."""
    cfg, run = ctx.config, ctx.run
    if cfg.on_cpu:
        return h, result, {"tuning": TuneRecord(from_=h, note=NOT_ON_CPU).model_dump(mode="json")}
    device = cfg.device_for(state.get("branch") or 0)
    judged: dict[str, EvalResult] = {}

    def evaluate(source: str) -> tuple[str, EvalResult]:
        vh, vr = ctx.evaluations.evaluate(source, device)  # stores the variant's kernel in the run
        judged[vh] = vr
        return vh, vr

    left = None if cfg.time_budget_s is None else cfg.time_budget_s - ctx.active_seconds()
    record = tune(run.kernel(h), result, evaluate, cfg.tune_budget, child_hash=h, time_left_s=left)
    if record.child is not None and record.child in judged:
        h, result = record.child, judged[record.child]
    return h, result, {"tuning": record.model_dump(mode="json")}
