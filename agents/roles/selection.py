"""Selection: the parents of a generation (or the reviewer's pinned one), and each branch's input, with what its
strategist needs from the archive and the trace (the lineage's history with what each child launched, the
moves tried, the builtin's tuning sweeps, inspirations, predictions, steering, whether the lineage plateaued).

Pure reading of the archive and the run: nothing here calls a model or the evaluator.
"""

from __future__ import annotations

import random
from typing import Any

from kernelwright.evaluators.profiling import Profile, headline
from kernelwright.tools.review_desk import ReviewDesk

from .. import briefing
from ..archive import describe, inspirations, lineage_history, prediction_record, select_parents, tried_on
from ..builtin import lineage_gains
from ..context import RunContext
from ..stopping import counted_steps
from .common import State, load_archive


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
    out = {**item, "launched": ", ".join(parts)} if parts else item
    if item.get("decision") != "elite":  # an elite's profile is the evidence of the steps built on it
        line = _profiled(ctx, full)
        if line:
            out = {**out, "profiled": line}
    return out


def _profiled(ctx: RunContext, h: str) -> str | None:
    """The Nsight Compute headline of a child the archive did not keep as an elite, where one was collected
    (`archiving.profile_losers`: one losing child per device and generation, where a model analyses)."""
    path = ctx.run.path / "profiles" / f"{h}.json"
    try:
        return headline(Profile.model_validate_json(path.read_text())) if path.exists() else None
    except (OSError, ValueError):
        return None  # an unreadable profile leaves the line as it was


def branch_inputs(state: State, ctx: RunContext) -> list[State]:
    """One branch's input per parent of the generation, with what its strategist needs from the archive."""
    archive = load_archive(state, ctx)
    steering = ReviewDesk(ctx.run).steering()
    children = {s.child_id[:12]: s.child_id for s in archive.steps if s.child_id}  # history items carry 12 digits
    out = []
    trace = ctx.run.trace()
    tunings = tuned_children(trace)
    for i, parent in enumerate(state["parents"]):
        history = [_with_tuning(_with_launch(ctx, h, children), tunings) for h in lineage_history(archive, parent)]
        swept, sweep_text, tuned_by = tuning_seen(trace, parent)
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


def tuned_children(trace: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The tuning sweeps that replaced a step's child by a tuned variant, by the step (a later step whose coder wrote
    that variant's very source was not tuned)."""
    return {str(r.get("step_id")): t for r in trace if (t := r.get("tuning") or {}).get("chose") and t.get("child")}


def _with_tuning(item: dict[str, Any], tunings: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A history item whose child is the builtin's tuned variant of what the coder wrote, with the written kernel's
    own speed-up beside the tuned one: the step's measured speed-up is the tuned child's, and a model read a
    structural change as the gain that a block size made (a relay run on L2Norm, 2026-11-26: as written 1.003×,
    tuned 1.098×)."""
    t = tunings.get(str(item.get("step_id")))
    measured, written_ms, chosen_ms = item.get("measured_speedup"), t and t.get("from_ms"), t and t.get("chosen_ms")
    if not t or str(t.get("child"))[:12] != str(item.get("child") or "")[:12] or measured is None or not written_ms \
            or not chosen_ms:
        return item
    return {**item, "tuned": str(t["chose"]), "as_written_speedup": measured * chosen_ms / written_ms}


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


PLATEAU_WINDOW = 4


def plateaued(history: list[dict[str, Any]]) -> bool:
    """The lineage's last `PLATEAU_WINDOW` steps were all tried and none became an elite (pair moves next)."""
    recent = history[-PLATEAU_WINDOW:]
    return len(recent) == PLATEAU_WINDOW and not any(h.get("decision") == "elite" for h in recent)
