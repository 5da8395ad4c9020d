"""The roles' decisions: seed, select, analyst, strategist, coder, verifier (per branch) and the archive.

Each role takes the small state it needs (a plain dict) and the run's `RunContext`, does its work through
tools (the run store, evaluation, the coder's tools) and returns a small update. Nothing here knows
LangGraph: `graphs/nodes.py` adapts these functions into graph nodes. Each of the analyst, strategist
and coder has two policies, the builtin one (no model) and the language-model one (`llm.py`), chosen per
role by the run's config (`model`, `role_models`).
"""

from __future__ import annotations

import difflib
import json
import logging
import random
import time
from typing import Any

from kernelwright.evaluators import EvalResult, render_facts
from kernelwright.evaluators.profiling import Profile, render
from kernelwright.tools.coding import QuickCheck
from kernelwright.tools.review import ReviewDesk, Steering

from . import briefing, llm, playbook, stopping
from . import review as reviews
from .archive import (Archive, Outcome, admit, describe, inspirations, lineage_history, prediction_record,
                      recheck_best, select_parents, tried_on)
from .archive import seed as seed_archive
from .builtin import apply_proposal, diagnose, lineage_gains, propose
from .context import RunContext
from .moves import catalog, no_moves_reason
from .records import StepRecord
from .schemas import STRUCTURAL, Diagnosis, Proposal
from .tuning import NOT_ON_CPU, TuneRecord, tune

log = logging.getLogger(__name__)

State = dict[str, Any]

# the run's status words and the stop rules live in `stopping` (re-exported here for the API and the graph)
STOPPED_ON_REQUEST = stopping.STOPPED_ON_REQUEST
RUNNING, STOPPED, FINISHED, FAILED = stopping.RUNNING, stopping.STOPPED, stopping.FINISHED, stopping.FAILED
counted_steps = stopping.counted_steps


def outcome_of(h: str, result: EvalResult) -> Outcome:
    t = result.timing
    return Outcome(child_id=h, verdict=result.verdict, reason=str(result.reason),
                   median_ms=t.median_ms if t else None, speedup_vs_eager=t.speedup_vs_eager if t else None,
                   speedup_vs_compile=t.speedup_vs_compile if t else None,
                   fraction_of_floor=t.fraction_of_floor if t else None, noise_band=t.noise_band if t else 0.0,
                   suspect=list(t.suspect) if t else [], kernels=[k.model_dump() for k in result.kernels],
                   bound=t.bound if t else None)


def _failure(e: llm.ProviderError | llm.ModelError) -> tuple[str, str]:
    return str(e), e.kind


# -- the archive in the run directory ---------------------------------------------------------------------


def load_archive(state: State, ctx: RunContext) -> Archive:
    """The archive a state refers to: `{"version": g}` names the run directory's archive after generation g
    (the full population, the step list and the failed-proposal index stay out of the checkpoints)."""
    ref = state.get("archive") or {}
    if ref.get("version") is None:
        return Archive.model_validate(ref) if ref.get("entries") else Archive()
    return Archive.model_validate(ctx.run.archive(ref["version"]))


def store_archive(ctx: RunContext, archive: Archive, version: int) -> dict[str, Any]:
    """Write the archive into the run directory; what goes into the graph state (a few numbers)."""
    ctx.run.put_archive(version, archive.model_dump())
    best = archive.best
    return {"version": version, "steps": len(archive.steps), "entries": len(archive.entries),
            "best": best.id if best else None}


# -- the outer loop ---------------------------------------------------------------------------------------


def seed(state: State, ctx: RunContext) -> State:
    """Verify the seed kernel and start the archive with it (skipped when resuming a seeded run)."""
    if (state.get("archive") or {}).get("version") is not None:
        return {}
    run, cfg = ctx.run, ctx.config
    h = run.info().config.seed_kernel
    written = h is None
    if h is None:
        # every device the run uses is set up (workers, reference, baselines) while the model writes the first
        # kernel, instead of on the critical path of that kernel's verification
        ctx.evaluations.prepare(cfg.places())
        h, provider_down = _write_seed(ctx)
        if h is None:
            why = provider_down or "the model wrote no kernel that passes the verifier from the reference"
            # a provider that stayed down is resumable: the seed is written again when the run resumes
            run.update(status=FAILED, stop_reason=why, resumable=provider_down is not None)
            return {"stop": why, "archive": {}}
    # the other devices set up (workers, reference, baselines) while the first judges the seed
    others = cfg.places()[1:]
    run.set_phase(f"verifying the seed kernel on {cfg.device_for(0)}"
                  + (f"; warming {', '.join(others)} for the branches" if others else ""))
    ctx.evaluations.warm(run.kernel(h), others)
    h, result = ctx.evaluations.evaluate(run.kernel(h), cfg.device_for(0))
    if result.verdict == "error":
        run.update(status="failed", stop_reason=f"the evaluator could not judge the seed kernel: {result.reason}: "
                                                f"{result.detail}")
        return {"stop": f"the evaluator could not judge the seed kernel ({result.reason})", "archive": {}}
    if result.verdict != "pass":
        run.update(status="failed", stop_reason=f"the seed kernel is rejected: {result.reason}: {result.detail}")
        return {"stop": f"the seed kernel is rejected ({result.reason})", "archive": {}}
    archive = seed_archive(Archive(), outcome_of(h, result),
                           origin="the first kernel (the model wrote it from the reference)" if written else None)
    if result.timing is not None:
        if cfg.profile != "off":
            run.set_phase(f"profiling the seed kernel on {cfg.device_for(0)}")
        _collect_evidence(ctx, h, cfg.device_for(0))
    run.update(status="running", best_kernel=h, best_speedup=result.timing.speedup_vs_eager if result.timing else None)
    return {"archive": store_archive(ctx, archive, 0), "generation": 0}


def _collect_evidence(ctx: RunContext, h: str, device: str) -> None:
    """Profile a timed kernel for the roles (the seed, each newly admitted elite), unless the run says not to.
    Evidence is informative: a failure to collect it is logged and the run goes on."""
    mode = ctx.config.profile
    if mode == "off" or ctx.config.on_cpu:
        return
    try:
        ctx.evaluations.collect_evidence(h, device, ncu=mode == "auto")
    except Exception as e:  # noqa: BLE001 - the profile failing must not end the run
        log.warning("could not profile kernel %s: %s: %s", h[:12], type(e).__name__, e)


def _facts(ctx: RunContext, branch: int, brief: bool = False, admission: bool = True) -> str:
    """The device's facts as a prompt shows them (one clear line when they cannot be read): whole for the
    analyst and the first-kernel writer, `brief` (the device and its resources; not the measured peaks the
    analyst has already read) for the strategist (with the admission rule) and the coder (without)."""
    try:
        facts = ctx.evaluations.facts(ctx.config.device_for(branch))
        return briefing.clip(render_facts(facts, brief=brief, admission=admission), briefing.FACTS_CHARS)
    except Exception as e:  # noqa: BLE001 - facts are informative; the role still works without them
        return f"(the device's facts could not be read: {type(e).__name__}: {str(e)[:200]})"


def _label(state: State) -> str:
    return state.get("parent_label") or state["parent"][:12]


def _evidence(ctx: RunContext, h: str) -> Profile:
    return ctx.evaluations.evidence(h)


SEED_REPAIRS = 2
"""attempts the first-kernel writer gets, beyond one per branch, to repair a kernel the full verifier rejected
when no attempt has passed yet (a tolerance missed by one element of millions need not end the run)"""


def _write_seed(ctx: RunContext) -> tuple[str | None, str | None]:
    """No seed kernel was given: the coder's model writes `branches` candidates from the reference; the best
    verified one seeds the archive. While none has passed, up to `SEED_REPAIRS` more attempts each start from the
    last rejected kernel, told the verifier's verdict. Attempts, usage and transcripts go to run.json/config.
    Returns (the seed's hash or None, the provider's failure when it is down for good)."""
    run, cfg = ctx.run, ctx.config
    spec = cfg.model_for("coder")
    attempts: list[dict[str, Any]] = []
    best: tuple[float, str] | None = None
    provider_down = None
    rejected: tuple[str, str] | None = None
    n = max(1, cfg.branches)
    for k in range(n + SEED_REPAIRS):
        if k >= n and (best is not None or rejected is None):
            break  # one per branch, then repairs only while nothing passed and a rejected kernel can be repaired
        attempt_words = f"attempt {k + 1} of {n}" if k < n else f"repair {k - n + 1} of {SEED_REPAIRS}"
        preparing = ctx.evaluations.preparing()
        run.set_phase(f"writing the first kernel ({attempt_words}) with {spec}"
                      + (f"; preparing {', '.join(preparing)} meanwhile" if preparing else ""))
        usage = ctx.models.usage(spec, "coder", f"first kernel, {attempt_words}")
        transcript: list[dict[str, Any]] = []
        error = kind = None
        try:
            src, transcript = llm.write(ctx.models.chat_model(spec), run.problem_source(), quick_check(ctx), usage=usage,
                                        facts=_facts(ctx, 0), quick_check_text=_quick_check_text(ctx, 0),
                                        rejected=rejected if k >= n else None)
            error = None if src else "no kernel that passes the quick check"
        except (llm.ProviderError, llm.ModelError) as e:
            src, (error, kind) = None, _failure(e)
        path = run.put_blob("transcripts", f"seed-{k}.json", json.dumps(transcript, indent=1, default=str))
        attempt: dict[str, Any] = {**usage.record(), "transcript": str(path.relative_to(run.path)), "error": error,
                                   "error_kind": kind}
        if src is not None:
            run.set_phase(f"verifying the first kernel ({attempt_words}) on {cfg.device_for(k)}")
            h, result = ctx.evaluations.evaluate(src, cfg.device_for(k % n))
            attempt.update(kernel=h, verdict=result.verdict, reason=str(result.reason))
            if result.verdict == "fail":
                rejected = (src, f"{result.reason}: {result.detail}"[:1500])
            if result.verdict == "pass":
                score = (result.timing.speedup_vs_eager if result.timing else None) or 0.0
                if best is None or score > best[0]:
                    best = (score, h)
        attempts.append(attempt)
        if kind == "provider":
            provider_down = error
            break
    setup = run.info().config
    run.update(config={**setup.model_dump(), "seed_kernel": best[1] if best else None, "seed_written_by": spec,
                       "seed_attempts": attempts})
    return (best[1] if best else None), provider_down


def select(state: State, ctx: RunContext) -> State:
    cfg = ctx.config
    archive = load_archive(state, ctx)
    gen = state.get("generation", 0) + 1
    rng = random.Random(f"{cfg.seed}/{gen}")
    budget = cfg.step_budget()
    left = cfg.branches if budget is None else budget - counted_steps(archive)
    k = max(1, min(cfg.branches, left))
    pinned = ReviewDesk(ctx.run).steering().pinned
    if pinned and pinned in archive.entries:
        parents = [pinned] * k  # a reviewer pinned the parent: every branch starts from it
    else:
        parents = select_parents(archive, k, rng, cfg.explore)
    return {"parents": parents, "generation": gen, "results": None}


LAUNCHED_KERNELS = 2
"""kernels of a child named in its history line (the rest counted)"""


def _with_launch(ctx: RunContext, item: dict[str, Any], children: dict[str, str] | None = None) -> dict[str, Any]:
    """A history item with what its child launched (each kernel's grid, registers, spills, warps), where the
    verifier passed it: a structural child that measured no better than its parent was otherwise only a speed-up
    number, and the model guessed why two of them did nothing (level1/35_GroupNorm_, before issue 23's changes).
    `children`: the items' short child ids -> full ids (the archive's steps), else looked up in the run."""
    child = item.get("child")
    if not child or item.get("verdict") != "pass":
        return item
    try:
        full = (children or {}).get(child) or ctx.run.find_kernel(child)
        data = ctx.run.eval(full) or {}
    except Exception:  # noqa: BLE001 - an unreadable verdict leaves the line as it was
        return item
    kernels = data.get("kernels") or []
    parts = []
    for k in kernels[:LAUNCHED_KERNELS]:
        c = k.get("compiled") or {}
        grid = "x".join(map(str, k["grids"][0])) if k.get("grids") else "?"
        parts.append(" ".join([f"{k.get('name')} grid {grid}"] + [
            f"{c[n]} {w}" for n, w in (("registers", "registers"), ("spills", "spills"), ("num_warps", "warps"))
            if c.get(n) is not None]))
    if len(kernels) > LAUNCHED_KERNELS:
        parts.append(f"and {len(kernels) - LAUNCHED_KERNELS} more kernel(s)")
    return {**item, "launched": ", ".join(parts)} if parts else item


def branch_inputs(state: State, ctx: RunContext) -> list[State]:
    """One branch's input per parent of the generation, with what its strategist needs from the archive."""
    archive = load_archive(state, ctx)
    steering = ReviewDesk(ctx.run).steering()
    children = {s.child_id[:12]: s.child_id for s in archive.steps if s.child_id}  # history items carry 12 digits
    out = []
    for i, parent in enumerate(state["parents"]):
        history = [_with_launch(ctx, h, children) for h in lineage_history(archive, parent)]
        swept, sweep_text, tuned_by = tuning_seen(ctx.run.trace(), parent)
        out.append({
            "generation": state["generation"], "branch": i, "parent": parent,
            "step_id": f"g{state['generation']}b{i}",
            "lineage_gains": lineage_gains(archive, parent, ctx.run.kernel),
            "failed": list(dict.fromkeys([*tried_on(archive, parent), *swept])),
            "history": history,
            "sibling_rank": state["parents"][:i].count(parent),
            "plateaued": plateaued(history),
            "inspirations": briefing.inspiration_items(inspirations(archive, parent)),
            "predictions": prediction_record(archive, parent),
            "parent_label": describe(archive, parent) + tuned_by,
            **({"swept": sweep_text} if sweep_text else {}),
            **({} if steering.empty() else {"steering": steering.model_dump()}),
        })
    return out


def tuning_seen(trace: list[dict[str, Any]], kernel: str) -> tuple[list[str], str, str]:
    """What the builtin's tuning sweeps measured around `kernel` (a structural child, as written or as tuned), for
    the roles that start from it: (the knob keys tried on exactly this kernel, which need no second try; a line per
    variant measured, with its time or its failure; the words that say the tuner changed a knob of it)."""
    keys: list[str] = []
    lines: list[str] = []
    tuned_by = ""
    for r in trace:
        t = r.get("tuning") or {}
        if kernel not in (t.get("from"), t.get("child")):
            continue
        if t.get("child") == kernel and t.get("chose"):
            tuned_by = f"; its knobs tuned by the builtin after the step: {t['chose']}"
        tried = t.get("tried") or []
        if t.get("from") == kernel and not t.get("chose"):
            keys += [v["key"] for v in tried if v.get("key")]
        start = f"{t['from_ms']:.4g} ms as written" if t.get("from_ms") else "as written"
        lines.append(f"- the builtin's sweep of step {r.get('step_id')}'s child ({start}): " + "; ".join(
            f"{v.get('key')} {v['median_ms']:.4g} ms" if v.get("median_ms") is not None
            else f"{v.get('key')} {v.get('verdict')} ({v.get('reason')}"
                 + (f": {v['detail'][:120]}" if v.get("detail") else "") + ")" for v in tried)
            + (f"; chosen: {t['chose']}" if t.get("chose") else "; none chosen"))
    return keys, "\n".join(lines), tuned_by


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


PLATEAU_WINDOW = 4


def plateaued(history: list[dict[str, Any]]) -> bool:
    """The lineage's last `PLATEAU_WINDOW` steps were all tried and none became an elite (pair moves next)."""
    recent = history[-PLATEAU_WINDOW:]
    return len(recent) == PLATEAU_WINDOW and not any(h.get("decision") == "elite" for h in recent)


# -- the language-model policies --------------------------------------------------------------------------


def _llm_record(state: State, ctx: RunContext, role: str, usage: llm.Usage, transcript: list[dict[str, Any]],
                error: tuple[str, str] | None = None) -> dict[str, Any]:
    """The branch's `llm` field with this role's record added; the transcript goes to the run directory."""
    run = ctx.run
    path = run.put_blob("transcripts", f"{state['step_id']}-{role}.json", json.dumps(transcript, indent=1, default=str))
    rec = {**usage.record(), "transcript": str(path.relative_to(run.path))}
    if error:
        rec["error"], rec["error_kind"] = error
    return {**(state.get("llm") or {}), role: rec}


ANALYST_HISTORY = 4
"""the lineage's last steps the analyst is shown (the strategist gets the whole history)"""


def _llm_analyst(state: State, ctx: RunContext) -> State:
    run = ctx.run
    result = ctx.evaluations.cached(state["parent"])
    evidence = _evidence(ctx, state["parent"])
    spec = ctx.config.model_for("analyst")
    usage, transcript = ctx.models.usage(spec, "analyst", state["step_id"]), []
    error = None
    try:
        d = llm.analyse(ctx.models.chat_model(spec), problem=run.problem_source(), parent=run.kernel(state["parent"]),
                        evaluation=llm.describe_eval(result), profile=render(evidence, briefing.EVIDENCE_CHARS),
                        facts=_facts(ctx, state.get("branch") or 0), usage=usage, transcript=transcript,
                        parent_label=_label(state),
                        history=briefing.render_history((state.get("history") or [])[-ANALYST_HISTORY:]))
    except (llm.ProviderError, llm.ModelError) as e:
        # the builtin reading keeps the branch going; the failure is in the trace
        d, error = _builtin_diagnosis(result, evidence), _failure(e)
    return {"diagnosis": d.model_dump(), "llm": _llm_record(state, ctx, "analyst", usage, transcript, error)}


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
    evidence = "" if ctx.config.uses_model("analyst") else render(_evidence(ctx, parent), briefing.EVIDENCE_CHARS)
    try:
        p = llm.strategise(ctx.models.chat_model(spec), problem=run.problem_source(),
                           parent=parent_src, standing=llm.standing(ctx.evaluations.cached(parent)),
                           diagnosis=Diagnosis.model_validate(state["diagnosis"]),
                           history=briefing.render_history(state.get("history") or []),
                           failed=list(state.get("failed") or []), swept=state.get("swept") or "",
                           usage=usage, transcript=transcript,
                           sibling_rank=state.get("sibling_rank") or 0,
                           facts=_facts(ctx, state.get("branch") or 0, brief=True), evidence=evidence,
                           inspirations=briefing.render_inspirations(state.get("inspirations") or [], parent,
                                                                     parent_src, run.kernel),
                           predictions=briefing.clip(state.get("predictions") or "(none yet)",
                                                     briefing.PREDICTIONS_CHARS),
                           parent_label=_label(state), steering=_reviewer_says(state),
                           coder_can=_coder_can(ctx, parent_src), playbook=playbook.for_strategist(ctx, state))
        rec = _llm_record(state, ctx, "strategist", usage, transcript)
        ban = reviews.banned(p.model_dump(), _steering(state))
        if ban:
            return {"proposal": None, "no_moves": f"the model proposed a change of a banned kind ({ban})", "llm": rec}
        return {"proposal": p.model_dump(), "llm": rec}
    except (llm.ProviderError, llm.ModelError) as e:
        return {"proposal": None, "llm": _llm_record(state, ctx, "strategist", usage, transcript, _failure(e))}


def quick_check(ctx: RunContext, branch: int = 0) -> QuickCheck:
    """On the CPU the quick check is the real verifier; its verdict is cached by the draft's hash (the draft
    itself is not stored as a run kernel), so the verifier reuses it when that source becomes the child. On a
    GPU it is the evaluation service's quick check in this run's evaluator and workers: compile, one input set
    plus the problem's test inputs, every guard, no timing but one rough measurement at the problem's size.
    `shapes` (`evaluators.variants`: small, odd, tail) also runs it at those shape variants, each judged apart in
    quick mode, when the problem's own shapes pass; the check passes when every shape it ran passes."""
    device, on_cpu = ctx.config.device_for(branch), ctx.config.on_cpu
    last: dict[str, tuple[bool, str]] = {}  # the problem shapes' verdict of the last source checked

    def own(source: str) -> tuple[bool, str]:
        if source in last:
            return last[source]
        if on_cpu:
            _, result = ctx.evaluations.evaluate(source, device, store=False)
        else:
            result = ctx.evaluations.quick(source, device)
        if result.verdict == "pass":
            ran = "" if "test_inputs" in result.families else " (only the problem's own shapes: it gives no get_test_inputs)"
            rough = next((c.detail for c in result.checks if c.name == "rough_time"), "")
            verdict = True, (f"{result.detail}{ran} ({'verified' if on_cpu else 'quick check'})"
                             + (f"; {rough}" if rough else ""))
        else:
            verdict = False, f"{result.reason}: {result.detail or ''}"[:2000]
        last.clear()
        if result.verdict != "error":  # a failure of the judge is asked again next time
            last[source] = verdict
        return verdict

    def check(source: str, shapes: tuple[str, ...] = ()) -> tuple[bool, str]:
        ok, msg = own(source)
        if not shapes:
            return ok, msg
        lines = [f"problem shapes: {'pass' if ok else 'fail'}: {msg}"]
        if not ok:
            return False, "\n".join([*lines, f"{', '.join(shapes)}: not run (the problem's own shapes fail)"])
        variants = ctx.evaluations.quick_variants(source, device, shapes)
        lines += [v.line() for v in variants]
        # say which weight sizes no variant that ran changed, so a path along those dimensions is not taken for
        # tested (only the odd variant makes them odd, where the reference accepts it)
        ran = [v.shape for v in variants if v.result is not None]
        fixed = {k: v for k, v in ctx.evaluations.fixed_sizes().items()
                 if all(shape.sizes.get(k, v) == v for shape in ran)}
        if fixed:
            lines.append("not varied by any shape: " + ", ".join(f"{k}={v}" for k, v in fixed.items())
                         + " (read only by get_init_inputs: the weights keep these sizes"
                         + ("" if "odd" in shapes else "; the odd variant makes those it can odd") + ")")
        return all(v.passed or v.result is None for v in variants), "\n".join(lines)

    return check


def _quick_check_text(ctx: RunContext, branch: int) -> str:
    return llm.QUICK_CHECK_CPU if ctx.config.on_cpu else llm.QUICK_CHECK_GPU


def _diff(parent: str, parent_src: str, child_src: str) -> str:
    return "".join(difflib.unified_diff(parent_src.splitlines(keepends=True), child_src.splitlines(keepends=True),
                                        f"{parent}.py", "child.py"))


def _llm_coder(state: State, ctx: RunContext, parent_src: str, proposal: Proposal) -> State:
    run = ctx.run
    spec = ctx.config.model_for("coder")
    usage = ctx.models.usage(spec, "coder", state["step_id"])
    transcript: list[dict[str, Any]] = []
    error: tuple[str, str] | None = None
    try:
        branch = state.get("branch") or 0
        child_src, transcript = llm.code(
            ctx.models.chat_model(spec), parent_src, proposal, quick_check(ctx, branch), problem=run.problem_source(),
            usage=usage, facts=_facts(ctx, branch, brief=True, admission=False),
            inspirations=briefing.render_inspirations(state.get("inspirations") or [], state["parent"], parent_src,
                                                      run.kernel, briefing.CODER_INSPIRATIONS_CHARS),
            quick_check_text=_quick_check_text(ctx, branch), parent_label=_label(state))
        if not child_src:
            error = ("the coder produced no passing change", "model")
    except (llm.ProviderError, llm.ModelError) as e:
        child_src, error = None, _failure(e)
    rec = _llm_record(state, ctx, "coder", usage, transcript, error)
    if child_src is None:
        return {"child": None, "coder": {"policy": spec, "error": error[0] if error else None}, "llm": rec}
    return {"child": run.put_kernel(child_src), "coder": {"policy": spec, "diff": _diff(state["parent"], parent_src,
                                                                                          child_src)}, "llm": rec}


# -- one branch -------------------------------------------------------------------------------------------


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
    return {"diagnosis": _builtin_diagnosis(ctx.evaluations.cached(parent), _evidence(ctx, parent)).model_dump()}


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


def review_request(state: State, ctx: RunContext) -> dict[str, Any] | None:
    """What a paused step shows its reviewer (None: the run is unattended, `review` "none")."""
    if ctx.config.review == "none":
        return None
    return reviews.request(state, ctx.run.id)


def apply_review(state: State, answer: Any) -> State:
    """The reviewer's decision applied to the step. An answer that cannot be applied (a malformed proposal
    from LangGraph's UIs, where nothing checked it before) ends the step without a child, recorded."""
    try:
        return reviews.apply(state, reviews.parse(answer))
    except reviews.ReviewError as e:
        return {"review": reviews.ReviewRecord(decision="invalid", by="unknown", at=reviews.now(),
                                               message=str(e)).model_dump()}


def coder(state: State, ctx: RunContext) -> State:
    run = ctx.run
    rev = state.get("review") or {}
    if rev.get("decision") in ("reject", "invalid"):
        why = rev.get("message") or "no reason given"
        if rev["decision"] == "invalid":
            note = f"the review could not be applied: {why}"
        elif not state.get("proposal"):  # nothing was proposed: the reviewer skipped the step
            note = f"{state.get('no_moves') or 'no proposal'} (the reviewer skipped the step: {why})"
        else:
            note = f"the reviewer rejected the proposal: {why}"
        return {"child": None, "coder": {"note": note}}
    if state.get("given_kernel"):
        src = state["given_kernel"]
        parent_src = run.kernel(state["parent"])
        return {"child": run.put_kernel(src), "coder": {"policy": "human", "diff": _diff(state["parent"], parent_src, src)}}
    if not state.get("proposal"):
        return {"child": None, "coder": {"note": state.get("no_moves") or "no proposal"}}
    parent_src = run.kernel(state["parent"])
    proposal = Proposal.model_validate(state["proposal"])
    if ctx.config.uses_model("coder"):
        return _llm_coder(state, ctx, parent_src, proposal)
    try:  # a person's proposal may give a knob any value; the strategist's come from the catalog
        child_src = apply_proposal(parent_src, proposal, any_value=rev.get("decision") in ("edit", "respond"))
    except (KeyError, ValueError) as e:
        return {"child": None, "coder": {"error": str(e.args[0]) if e.args else str(e)}}
    return {"child": run.put_kernel(child_src), "coder": {"policy": "builtin",
                                                           "diff": _diff(state["parent"], parent_src, child_src)}}


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


# -- the archive ------------------------------------------------------------------------------------------


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


def archive_step(state: State, ctx: RunContext) -> State:
    """Admit the generation's children, write one trace record per step, decide whether to go on."""
    cfg, run = ctx.config, ctx.run
    archive = load_archive(state, ctx)
    done = {s.step_id for s in archive.steps if s.step_id}
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
        if step.decision == "elite":
            _collect_evidence(ctx, step.child_id or "", cfg.device_for(r.get("branch") or 0))
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
