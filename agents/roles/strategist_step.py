"""The strategist: one proposed change of the parent, by the builtin's ranked knob moves or by the run's model for
the strategist, told the diagnosis, the lineage's history, what was tried, the reviewer's steering and, when the
coder is the builtin, which knob moves that coder can apply.
"""

from __future__ import annotations

import random

from kernelwright.evaluators.profiling import render
from kernelwright.tools.review_desk import Steering

from .. import briefing, llm, playbook
from .. import proposal_review as reviews
from ..builtin import propose
from ..context import RunContext
from ..moves import catalog, no_moves_reason
from ..schemas import Diagnosis
from .common import State, evidence_of, facts_text, failure_of, label_of, llm_record


def strategist(state: State, ctx: RunContext) -> State:
    if ctx.config.uses_model("strategist"):
        return _llm_strategist(state, ctx)
    # one ordering per (generation, parent): siblings on the same parent rank the same moves the same way, so
    # `sibling_rank` gives each a different one (ties are broken at random, but identically for siblings)
    rng = random.Random(f"{ctx.config.seed}/{state['generation']}/{state['parent']}")
    source = ctx.run.kernel(state["parent"])
    tried = set(state.get("failed") or [])
    p = propose(source, Diagnosis.model_validate(state["diagnosis"]), state.get("lineage_gains") or {}, tried, rng,
                rank=state.get("sibling_rank") or 0, plateaued=bool(state.get("plateaued")),
                banned=frozenset(_steering(state).banned))
    if p is None:
        return {"proposal": None, "no_moves": no_moves_reason(source, tried)}
    return {"proposal": p.model_dump()}


def _steering(state: State) -> Steering:
    return Steering.model_validate(state.get("steering") or {})


def _coder_can(ctx: RunContext, parent_src: str) -> str:
    """For a model strategist whose coder is the builtin policy: the knob moves that coder can apply."""
    if ctx.config.uses_model("coder"):
        return ""
    keys = [m.key for m in catalog(parent_src)]
    return ("The coder is the builtin policy: it applies one knob change and nothing else. Propose one of these "
            f"keys (as `key`): {', '.join(keys[:40]) or '(none: this parent has no knob it can change)'}")


def _reviewer_says(state: State) -> str:
    """What the person said that the strategist must heed: the standing steering and the proposals they
    rejected on this lineage, with their reasons."""
    lines = [_steering(state).render()]
    lines += [f"- the reviewer rejected {h.get('proposal')} on this lineage: {h['why'].removeprefix('rejected by the reviewer: ')}"
              for h in state.get("history") or [] if str(h.get("why", "")).startswith("rejected by the reviewer")]
    return "\n".join(x for x in lines if x)


def _llm_strategist(state: State, ctx: RunContext) -> State:
    run = ctx.run
    spec = ctx.config.model_for("strategist")
    analyst = (state.get("llm") or {}).get("analyst") or {}
    if analyst.get("error_kind") == "provider" and analyst.get("model") == spec:
        # the same provider just stayed down past the retry window for the analyst: the branch ends without a
        # child now, instead of waiting out a second window (the run then stops, resumable, after one window)
        return {"proposal": None, "no_moves": f"no proposal: {analyst.get('error')}"}
    usage, transcript = ctx.models.usage(spec, "strategist", state["step_id"]), []
    parent = state["parent"]
    parent_src = run.kernel(parent)
    # the strategist reads the analyst's diagnosis, not the analyst's inputs again; the builtin analyst's reading is
    # too thin to stand for the profile, so then the profile is shown too
    evidence = "" if ctx.config.uses_model("analyst") else render(evidence_of(ctx, parent), briefing.EVIDENCE_CHARS)
    try:
        p = llm.strategise(ctx.models.chat_model(spec), problem=run.problem_source(),
                           parent=parent_src, standing=briefing.standing(ctx.evaluations.cached(parent)),
                           diagnosis=Diagnosis.model_validate(state["diagnosis"]),
                           history=briefing.render_history(state.get("history") or []),
                           failed=list(state.get("failed") or []), swept=state.get("swept") or "",
                           usage=usage, transcript=transcript,
                           sibling_rank=state.get("sibling_rank") or 0,
                           facts=facts_text(ctx, state.get("branch") or 0, brief=True), evidence=evidence,
                           inspirations=briefing.render_inspirations(state.get("inspirations") or [], parent,
                                                                     parent_src, run.kernel),
                           predictions=briefing.clip(state.get("predictions") or "(none yet)",
                                                     briefing.PREDICTIONS_CHARS),
                           parent_label=label_of(state), steering=_reviewer_says(state),
                           coder_can=_coder_can(ctx, parent_src), playbook=playbook.for_strategist(ctx, state))
        rec = llm_record(state, ctx, "strategist", usage, transcript)
        ban = reviews.banned(p.model_dump(), _steering(state))
        if ban:
            return {"proposal": None, "no_moves": f"the model proposed a change of a banned kind ({ban})", "llm": rec}
        return {"proposal": p.model_dump(), "llm": rec}
    except (llm.ProviderError, llm.ModelError) as e:
        return {"proposal": None, "llm": llm_record(state, ctx, "strategist", usage, transcript, failure_of(e))}
