"""The coder: the child kernel, from the reviewer's own kernel, the builtin's knob change or the run's model for
the coder (which edits the parent and checks drafts with `quick_check` until one passes); the step records the
diff against the parent. `quick_check` is also the first-kernel writer's check (`seed_step.py`).
"""

from __future__ import annotations

import difflib
from typing import Any

from kernelwright.evaluators.facts import programs_in, waves_line
from kernelwright.tools.coding import QuickCheck

from .. import briefing, llm
from ..builtin import apply_proposal
from ..context import RunContext
from ..schemas import Proposal
from .common import State, facts_text, failure_of, label_of, llm_record


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


def _waves(ctx: RunContext, device: str, result: Any) -> str:
    """The draft's compiled kernels at the problem's size, with the programs an SM holds and the waves their grid
    makes (`evaluators.facts.waves_line`), longest grid first; informative, so a failure to read it is silence."""
    try:
        kernels = sorted((k.model_dump() for k in result.kernels),
                         key=lambda k: -max((programs_in(g) for g in k.get("grids") or [[]]), default=0))
        return waves_line(kernels, ctx.evaluations.facts(device))
    except Exception:  # noqa: BLE001 - the check's verdict stands without it
        return ""


def quick_check(ctx: RunContext, branch: int = 0) -> QuickCheck:
    """On the CPU the quick check is the real verifier; its verdict is cached by the draft's hash (the draft
    itself is not stored as a run kernel), so the verifier reuses it when that source becomes the child. On a
    GPU it is the evaluation service's quick check in this run's evaluator and workers: compile, one input set
    plus the problem's test inputs, every guard, no timing but one rough measurement at the problem's size.
    `shapes` (`evaluators.variants`: small, odd, tail) also runs it at those shape variants, each judged apart in
    quick mode, when the problem's own shapes pass; the check passes when every shape it ran passes.

    One check serves one conversation (a coder's step, a first kernel's writing): what a reply explains is said in
    its first reply only (why only the problem's own shapes ran), or in the tool's description (what the sizes no
    variant changes are); later replies say what ran, not why again (a relay model read the same explanations in
    every reply, issue 23)."""
    device, on_cpu = ctx.config.device_for(branch), ctx.config.on_cpu
    last: dict[str, tuple[bool, str, str, bool]] = {}
    """the problem shapes' verdict of the last source checked: passed, the reply before and after where it says
    why only the problem's own shapes ran, and whether it says that"""
    said: set[str] = set()  # the explanations this conversation's replies have given

    def once(key: str, first: str, later: str) -> str:
        if key in said:
            return later
        said.add(key)
        return first

    def own(source: str) -> tuple[bool, str]:
        verdict = last.get(source)
        if verdict is None:
            if on_cpu:
                _, result = ctx.evaluations.evaluate(source, device, store=False)
            else:
                result = ctx.evaluations.quick(source, device)
            if result.verdict == "pass":
                rough = next((c.detail for c in result.checks if c.name == "rough_time"), "")
                waves = "" if on_cpu else _waves(ctx, device, result)
                tail = (f" ({'verified' if on_cpu else 'quick check'})" + (f"; {rough}" if rough else "")
                        + (f"\n{waves}" if waves else ""))
                verdict = True, result.detail, tail, "test_inputs" not in result.families
            else:
                verdict = False, f"{result.reason}: {result.detail or ''}"[:2000], "", False
            last.clear()
            if result.verdict != "error":  # a failure of the judge is asked again next time
                last[source] = verdict
        ok, head, tail, own_only = verdict
        ran = once("own", " (only the problem's own shapes: it gives no get_test_inputs)",
                   " (only the problem's own shapes)") if own_only else ""
        return ok, head + ran + tail

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
        if fixed:  # what these sizes are is said in quick_check's description (tools/coding.py)
            lines.append("not varied by any shape: " + ", ".join(f"{k}={v}" for k, v in fixed.items()))
        return all(v.passed or v.result is None for v in variants), "\n".join(lines)

    return check


def quick_check_text(ctx: RunContext, branch: int) -> str:
    return briefing.QUICK_CHECK_CPU if ctx.config.on_cpu else briefing.QUICK_CHECK_GPU


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
            usage=usage, facts=facts_text(ctx, branch, brief=True, admission=False),
            inspirations=briefing.render_inspirations(state.get("inspirations") or [], state["parent"], parent_src,
                                                      run.kernel, briefing.CODER_INSPIRATIONS_CHARS),
            quick_check_text=quick_check_text(ctx, branch), parent_label=label_of(state))
        if not child_src:
            error = ("the coder produced no passing change", "model")
    except (llm.ProviderError, llm.ModelError) as e:
        child_src, error = None, failure_of(e)
    rec = llm_record(state, ctx, "coder", usage, transcript, error)
    if child_src is None:
        return {"child": None, "coder": {"policy": spec, "error": error[0] if error else None}, "llm": rec}
    return {"child": run.put_kernel(child_src), "coder": {"policy": spec, "diff": _diff(state["parent"], parent_src,
                                                                                          child_src)}, "llm": rec}
