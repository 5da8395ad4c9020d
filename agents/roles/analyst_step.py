"""The analyst: a diagnosis of the parent from its verdict, timing and profile, by the builtin reading or by the
run's model for the analyst (which falls back to the builtin reading when the model fails, so the branch goes on).
"""

from __future__ import annotations

from kernelwright.evaluators import EvalResult
from kernelwright.evaluators.profiling import Profile, render

from .. import briefing, llm
from ..builtin import diagnose
from ..context import RunContext
from ..schemas import Diagnosis
from .common import State, evidence_of, facts_text, failure_of, label_of, llm_record


def _builtin_diagnosis(result: EvalResult | None, evidence: Profile | None = None) -> Diagnosis:
    if result is None:
        return diagnose(None, [])
    ncu = ([{"name": k.name, "metrics": k.metrics} for k in evidence.ncu.kernels]
           if evidence is not None and evidence.ncu.available else None)
    timing = result.timing or (evidence.timing if evidence is not None else None)
    return diagnose(timing, [k.model_dump() for k in result.kernels], ncu)


def analyst(state: State, ctx: RunContext) -> State:
    if ctx.config.uses_model("analyst"):
        return _llm_analyst(state, ctx)
    parent = state["parent"]
    return {"diagnosis": _builtin_diagnosis(ctx.evaluations.cached(parent), evidence_of(ctx, parent)).model_dump()}


ANALYST_HISTORY = 4
"""the lineage's last steps the analyst is shown (the strategist gets the whole history)"""


def _llm_analyst(state: State, ctx: RunContext) -> State:
    run = ctx.run
    result = ctx.evaluations.cached(state["parent"])
    evidence = evidence_of(ctx, state["parent"])
    spec = ctx.config.model_for("analyst")
    usage, transcript = ctx.models.usage(spec, "analyst", state["step_id"]), []
    error = None
    try:
        d = llm.analyse(ctx.models.chat_model(spec), problem=run.problem_source(), parent=run.kernel(state["parent"]),
                        evaluation=briefing.describe_eval(result), profile=render(evidence, briefing.EVIDENCE_CHARS),
                        facts=facts_text(ctx, state.get("branch") or 0), usage=usage, transcript=transcript,
                        parent_label=label_of(state),
                        history=briefing.render_history((state.get("history") or [])[-ANALYST_HISTORY:]),
                        swept=state.get("swept") or "")
    except (llm.ProviderError, llm.ModelError) as e:
        # the builtin reading keeps the branch going; the failure is in the trace
        d, error = _builtin_diagnosis(result, evidence), failure_of(e)
    return {"diagnosis": d.model_dump(), "llm": llm_record(state, ctx, "analyst", usage, transcript, error)}
