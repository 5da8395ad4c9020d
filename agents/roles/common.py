"""What several roles share: the state they exchange, the archive's place in the run directory, a verdict as the
archive's `Outcome`, and what the model roles are shown and record (the device's facts, the parent's label and
evidence, a model call's usage and transcript, a provider's or model's failure).

Kept apart so that each role's module holds its own decision only; nothing here decides anything.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kernelwright.evaluators import EvalResult, render_facts
from kernelwright.evaluators.profiling import Profile

from .. import briefing, llm
from ..archive import Archive, Outcome
from ..context import RunContext

log = logging.getLogger(__name__)

State = dict[str, Any]


def outcome_of(h: str, result: EvalResult) -> Outcome:
    """Kernel `h`'s verdict as the archive admits it (the seed's, and each step's child's)."""
    t = result.timing
    return Outcome(child_id=h, verdict=result.verdict, reason=str(result.reason),
                   median_ms=t.median_ms if t else None, speedup_vs_eager=t.speedup_vs_eager if t else None,
                   speedup_vs_compile=t.speedup_vs_compile if t else None,
                   fraction_of_floor=t.fraction_of_floor if t else None, noise_band=t.noise_band if t else 0.0,
                   suspect=list(t.suspect) if t else [], kernels=[k.model_dump() for k in result.kernels],
                   bound=t.bound if t else None, detail="" if result.verdict == "pass" else (result.detail or "")[:300])


def failure_of(e: llm.ProviderError | llm.ModelError) -> tuple[str, str]:
    """A model call's failure as a record keeps it: (the sentence, "provider" or "model")."""
    return str(e), e.kind


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


def collect_evidence(ctx: RunContext, h: str, device: str) -> None:
    """Profile a timed kernel for the roles (the seed, each newly admitted elite, a losing child where a model
    analyses), unless the run says not to.
    Evidence is informative: a failure to collect it is logged and the run goes on."""
    mode = ctx.config.profile
    if mode == "off" or ctx.config.on_cpu:
        return
    try:
        ctx.evaluations.collect_evidence(h, device, ncu=mode == "auto")
    except Exception as e:  # noqa: BLE001 - the profile failing must not end the run
        log.warning("could not profile kernel %s: %s: %s", h[:12], type(e).__name__, e)


def facts_text(ctx: RunContext, branch: int, brief: bool = False, admission: bool = True) -> str:
    """The device's facts as a prompt shows them (one clear line when they cannot be read): whole for the
    analyst and the first-kernel writer, `brief` (the device and its resources; not the measured peaks the
    analyst has already read) for the strategist (with the admission rule) and the coder (without)."""
    try:
        facts = ctx.evaluations.facts(ctx.config.device_for(branch))
        return briefing.clip(render_facts(facts, brief=brief, admission=admission), briefing.FACTS_CHARS)
    except Exception as e:  # noqa: BLE001 - facts are informative; the role still works without them
        return f"(the device's facts could not be read: {type(e).__name__}: {str(e)[:200]})"


def label_of(state: State) -> str:
    """How the prompts name the branch's parent: the archive's description of it, else its short id."""
    return state.get("parent_label") or state["parent"][:12]


def evidence_of(ctx: RunContext, h: str) -> Profile:
    """What the run knows of kernel `h` without running anything (`Evaluations.evidence`)."""
    return ctx.evaluations.evidence(h)


def llm_record(state: State, ctx: RunContext, role: str, usage: llm.Usage, transcript: list[dict[str, Any]],
               error: tuple[str, str] | None = None) -> dict[str, Any]:
    """The branch's `llm` field with this role's record added; the transcript goes to the run directory."""
    run = ctx.run
    path = run.put_blob("transcripts", f"{state['step_id']}-{role}.json", json.dumps(transcript, indent=1, default=str))
    rec = {**usage.record(), "transcript": str(path.relative_to(run.path))}
    if error:
        rec["error"], rec["error_kind"] = error
    return {**(state.get("llm") or {}), role: rec}
