"""When a run stops, and why: every stop rule in one place (issue 25, item 2).

After each generation the archive step asks `decide` whether the run goes on. In order: a model provider that stayed
down past its retry window (status `failed`, resumable); the step budget (`RunConfig.step_budget`: iterations, or 8
with no budget at all); the time budget (the run's driven seconds, not since it was created); the token and cost
budgets (every model call of the run, the first-kernel writer's included); then the search's own rules
(`stop_reason`: close enough to the roofline and no slower than torch.compile, or a plateau); a catalog with no move
left; and last a stop someone asked for (status `stopped`, resumable). The words of a run's status are here too.
"""

from __future__ import annotations

from typing import Any

from .archive import Archive
from .context import RunConfig

STOPPED_ON_REQUEST = "stopped on request: the step in flight was finished and checkpointed"
"""The stop reason of a run asked to stop (`RunContext.request_stop`); such a run can be resumed."""

# The words a run's status takes (run.json's `status`): running while a driver works on it; `stopped` when asked
# to stop (Ctrl-C, a stop request) and `failed` when the model provider stayed down past the retry window, both
# resumable (`RunInfo.resumable`); `failed` too when the seed is rejected (not resumable); `finished` when a
# budget, a plateau, the target or an exhausted search ended it.
RUNNING, STOPPED, FINISHED, FAILED = "running", "stopped", "finished", "failed"


def counted_steps(archive: Archive) -> int:
    """Steps that count against the iteration budget: all but the proposals a person rejected and the steps
    the model provider's outage left without a child (no child was made or judged for them)."""
    return sum(1 for s in archive.steps if s.reason not in ("reviewer_rejected", "provider_failed"))


def stop_reason(archive: Archive, *, plateau_steps: int = 20, roofline_target: float | None = 0.9) -> str | None:
    """Why the search should stop now (plateau, or close enough to the roofline and no slower than torch.compile),
    or None. Near the floor is not enough while torch.compile is faster: on a memory-bound GEMM (KernelBench
    level2/56 on an H100) the first kernel reached 93 % of the floor at 0.95x torch.compile, and a run that stopped
    there stopped behind the baseline it exists to beat."""
    best = archive.best
    if best and roofline_target is not None and best.fraction_of_floor is not None \
            and best.fraction_of_floor >= roofline_target \
            and (best.speedup_vs_compile is None or best.speedup_vs_compile >= 1.0):
        return f"the best kernel reaches {best.fraction_of_floor:.0%} of the roofline floor (target {roofline_target:.0%})"
    if len(archive.steps) >= plateau_steps:
        recent = archive.steps[-plateau_steps:]
        if not any(s.decision == "elite" for s in recent):
            return f"no improvement in the last {plateau_steps} steps"
    return None


def decide(archive: Archive, cfg: RunConfig, *, results: list[dict[str, Any]], spent: dict[str, Any],
           active_s: float, stop_requested: bool) -> tuple[str | None, str]:
    """(why the run stops now, or None; the status it then takes) after a generation whose branch results are
    `results`, with `spent` tokens and cost so far, `active_s` seconds driven, and whether a stop was asked for."""
    failures = [u["error"] for r in results for u in (r.get("llm") or {}).values() if u.get("error_kind") == "provider"]
    budget = cfg.step_budget()
    if results and failures and all(not r.get("child") for r in results):
        # the provider stayed down past the retry window (or refused for good): say so rather than spin, and
        # leave the run resumable; a stop asked for meanwhile (which ends the retries) is what the user sees
        return (STOPPED_ON_REQUEST, STOPPED) if stop_requested else (failures[0], FAILED)
    if budget is not None and counted_steps(archive) >= budget:
        return f"iteration budget reached ({counted_steps(archive)} steps)", FINISHED
    if cfg.time_budget_s is not None and active_s >= cfg.time_budget_s:  # the run's driven time, not since created
        return f"time budget reached ({cfg.time_budget_s:.0f} s)", FINISHED
    if cfg.token_budget is not None and spent["tokens"] >= cfg.token_budget:
        return f"token budget reached ({spent['tokens']} of {cfg.token_budget} tokens)", FINISHED
    if cfg.cost_budget_usd is not None and spent["cost_usd"] >= cfg.cost_budget_usd:
        return f"cost budget reached (${spent['cost_usd']:.4f} of ${cfg.cost_budget_usd:.4f})", FINISHED
    stop = stop_reason(archive, plateau_steps=cfg.plateau(), roofline_target=cfg.roofline_target)
    # a model that proposed nothing this time may next time (each such step still spends the budget);
    # the builtin catalog proposing nothing means it is exhausted
    if stop is None and results and all(not r.get("proposal") and "strategist" not in (r.get("llm") or {})
                                        for r in results):
        notes = [(r.get("coder") or {}).get("note") for r in results]
        stop = "search exhausted: " + (next((n for n in notes if n), None) or "no parent has a move left")
    if stop is None and stop_requested:
        return STOPPED_ON_REQUEST, STOPPED
    return stop, FINISHED
