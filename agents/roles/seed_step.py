"""The seed step: the run's first kernel verified and made the archive's first entry, or, when the run was given
none, written from the reference by the coder's model (one attempt per branch, then repairs of a rejected one).

Apart from selection and the branch because it runs once, before the loop, and decides whether there is a loop.
"""

from __future__ import annotations

import json
from typing import Any

from .. import llm, playbook
from ..archive import Archive
from ..archive import seed as seed_archive
from ..context import RunContext
from ..stopping import FAILED
from .coder_step import quick_check, quick_check_text
from .common import State, collect_evidence, facts_text, failure_of, outcome_of, store_archive


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
        collect_evidence(ctx, h, cfg.device_for(0))
    run.update(status="running", best_kernel=h, best_speedup=result.timing.speedup_vs_eager if result.timing else None)
    return {"archive": store_archive(ctx, archive, 0), "generation": 0}


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
    learned: str | None = None  # what earlier runs learned: read once, every attempt is shown the same entries
    for k in range(n + SEED_REPAIRS):
        if k >= n and (best is not None or rejected is None):
            break  # one per branch, then repairs only while nothing passed and a rejected kernel can be repaired
        attempt_words = f"attempt {k + 1} of {n}" if k < n else f"repair {k - n + 1} of {SEED_REPAIRS}"
        preparing = ctx.evaluations.preparing()
        run.set_phase(f"writing the first kernel ({attempt_words}) with {spec}"
                      + (f"; preparing {', '.join(preparing)} meanwhile" if preparing else ""))
        if learned is None:
            learned = playbook.for_writer(ctx)
        usage = ctx.models.usage(spec, "coder", f"first kernel, {attempt_words}")
        transcript: list[dict[str, Any]] = []
        error = kind = None
        try:
            src, transcript = llm.write(ctx.models.chat_model(spec), run.problem_source(), quick_check(ctx), usage=usage,
                                        facts=facts_text(ctx, 0), quick_check_text=quick_check_text(ctx, 0),
                                        rejected=rejected if k >= n else None, learned=learned)
            error = None if src else "no kernel that passes the quick check"
        except (llm.ProviderError, llm.ModelError) as e:
            src, (error, kind) = None, failure_of(e)
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
