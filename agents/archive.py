"""The archive: which kernels the search keeps, which it builds on next, and when it stops.

Pure decisions over plain data (pydantic models in, pydantic models out), so they are tested without a
graph, a model or a GPU. The archive keeps:

- every verified kernel it admitted (`entries`), keyed by the content hash of its source;
- elites: the best few by measured speedup;
- niches: a MAP-Elites grid over descriptors of the launched kernels (warps, stages, the largest block
  size, and the roofline side that bounds it), one occupant per cell, so the search keeps structurally
  different kernels alive and not only the current best;
- the step tuples (parent, change, child, measured delta, decision), and per parent the proposals that
  failed, which are never tried on that parent again.

A child is admitted only if it is verified correct, its timing is not suspect, and its gain over its
parent lies outside the noise band of the measurement that produced it. Imports nothing of kernelwright.
"""

from __future__ import annotations

import math
import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Entry(BaseModel):
    """One admitted kernel."""

    id: str
    parent_id: str | None = None
    generation: int = 0
    median_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    fraction_of_floor: float | None = None
    noise_band: float = 0.0
    cell: tuple[int, int, int, str] | None = None
    proposal_key: str | None = None

    @property
    def score(self) -> float:
        """What the search maximises: speedup over eager (1.0 when untimed, e.g. in CPU mode)."""
        return self.speedup_vs_eager if self.speedup_vs_eager is not None else 1.0


class Outcome(BaseModel):
    """What the verifier measured for a child, reduced to what the archive decides on."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    child_id: str
    """the child kernel's hash"""
    verdict: Literal["pass", "fail", "error"]
    """error: the evaluator could not judge the child (not the child's failure)"""
    reason: str
    """the verifier's reason code"""
    median_ms: float | None = None
    """the child's median device time (None: untimed, e.g. on the CPU)"""
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    fraction_of_floor: float | None = None
    """roofline floor / median (1.0 = at the floor)"""
    noise_band: float = 0.0
    """the measurement's A/A noise band: a gain inside it is no gain"""
    suspect: list[str] = Field(default_factory=list)
    """the timing's suspect flags (a suspect child is never admitted)"""
    kernels: list[dict] = Field(default_factory=list)
    """launched kernels with their compiled resources"""
    bound: str | None = None
    """memory or compute, by the roofline"""


class Step(BaseModel):
    """The step tuple: parent, change, child, measured delta, and what the archive decided."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    step: int
    """position in the archive's step list"""
    step_id: str | None = None
    """the graph's id for the step (g<generation>b<branch>)"""
    parent_id: str
    proposal_key: str
    """the proposal's key ("none" when there was no proposal)"""
    child_id: str | None
    verdict: str
    """the verifier's verdict on the child"""
    reason: str
    delta: float | None = None
    """child score / parent score - 1"""
    decision: Literal["elite", "niche", "rejected"]
    """elite: among the best; niche: kept for diversity; rejected: not admitted"""
    why: str
    """the decision in one sentence"""


class Archive(BaseModel):
    """The population. Treat as a value: the functions below return new archives."""

    entries: dict[str, Entry] = Field(default_factory=dict)
    elites: list[str] = Field(default_factory=list)
    niches: dict[str, str] = Field(default_factory=dict, description="cell key -> entry id")
    failed: dict[str, list[str]] = Field(default_factory=dict, description="parent id -> proposal keys that failed")
    steps: list[Step] = Field(default_factory=list)
    elite_size: int = 8

    @property
    def best(self) -> Entry | None:
        return self.entries[self.elites[0]] if self.elites else None


def _bucket(value: int | None, edges: tuple[int, ...]) -> int:
    if value is None:
        return -1
    for i, e in enumerate(edges):
        if value <= e:
            return i
    return len(edges)


def cell_of(kernels: list[dict], bound: str | None) -> tuple[int, int, int, str]:
    """The niche of a kernel: (num_warps bucket, num_stages bucket, shared-memory bucket, bound side).

    Taken from the launched kernel that carries the most launches; compiled resources come from the
    verifier (GPU only; on the CPU every kernel shares the -1 buckets)."""
    if not kernels:
        return (-1, -1, -1, bound or "?")
    main = max(kernels, key=lambda k: k.get("launches", 0))
    c = main.get("compiled") or {}
    return (_bucket(c.get("num_warps"), (1, 2, 4, 8)), _bucket(c.get("num_stages"), (1, 2, 3, 4)),
            _bucket(c.get("shared_bytes"), (0, 16 << 10, 64 << 10, 128 << 10)), bound or "?")


def _key(cell: tuple[int, int, int, str]) -> str:
    return "/".join(map(str, cell))


def seed(archive: Archive, outcome: Outcome) -> Archive:
    """Start the archive from a verified seed kernel."""
    if outcome.verdict != "pass":
        raise ValueError(f"the seed kernel is not verified correct ({outcome.reason})")
    entry = _entry(outcome, parent=None, generation=0, proposal_key=None)
    new = archive.model_copy(deep=True)
    new.entries[entry.id] = entry
    new.elites = [entry.id]
    new.niches[_key(entry.cell)] = entry.id  # type: ignore[arg-type]
    return new


def _entry(outcome: Outcome, parent: Entry | None, generation: int, proposal_key: str | None) -> Entry:
    return Entry(id=outcome.child_id, parent_id=parent.id if parent else None, generation=generation,
                 median_ms=outcome.median_ms, speedup_vs_eager=outcome.speedup_vs_eager,
                 speedup_vs_compile=outcome.speedup_vs_compile, fraction_of_floor=outcome.fraction_of_floor,
                 noise_band=outcome.noise_band, cell=cell_of(outcome.kernels, outcome.bound), proposal_key=proposal_key)


def admit(archive: Archive, parent_id: str, proposal_key: str, outcome: Outcome | None,
          step_id: str | None = None) -> tuple[Archive, Step]:
    """Record one step and decide whether the child joins the archive.

    `outcome` is None when no child was produced (the coder gave up). Returns the new archive and the step."""
    parent = archive.entries[parent_id]
    new = archive.model_copy(deep=True)
    n = len(new.steps)

    def reject(why: str, reason: str, verdict: str = "fail", delta: float | None = None) -> tuple[Archive, Step]:
        new.failed.setdefault(parent_id, [])
        if proposal_key not in new.failed[parent_id]:
            new.failed[parent_id].append(proposal_key)
        step = Step(step=n, step_id=step_id, parent_id=parent_id, proposal_key=proposal_key, child_id=outcome.child_id if outcome else None,
                    verdict=verdict, reason=reason, delta=delta, decision="rejected", why=why)
        new.steps.append(step)
        return new, step

    if outcome is None:
        return reject("no child was produced", "no_child")
    if outcome.verdict == "error":
        # The judge failed, not the child: the move is not marked as tried on this parent, so it can be tried again.
        step = Step(step=n, step_id=step_id, parent_id=parent_id, proposal_key=proposal_key, child_id=outcome.child_id,
                    verdict="error", reason=outcome.reason, decision="rejected",
                    why=f"the evaluator could not judge it ({outcome.reason}); not counted against the move")
        new.steps.append(step)
        return new, step
    if outcome.verdict != "pass":
        return reject(f"not verified correct ({outcome.reason})", outcome.reason)
    if outcome.suspect:
        return reject(f"timing flagged as suspect: {'; '.join(outcome.suspect)}", "suspect", "pass")
    if outcome.child_id in new.entries:
        return reject("identical to a kernel already in the archive", "duplicate", "pass")
    if outcome.speedup_vs_eager is None:
        return reject("verified correct but not timed (CPU mode runs Triton's interpreter): there is no measured "
                      "gain to admit it on", "untimed", "pass")
    child = _entry(outcome, parent, parent.generation + 1, proposal_key)
    delta = child.score / parent.score - 1 if parent.score > 0 else math.inf
    band = max(outcome.noise_band, parent.noise_band)
    key = _key(child.cell)  # type: ignore[arg-type]
    occupant = new.entries.get(new.niches.get(key, ""))
    if delta <= band:
        if occupant is None and delta >= -band:
            # Not faster, but structurally new and no slower: it opens a niche.
            new.entries[child.id] = child
            new.niches[key] = child.id
            step = Step(step=n, step_id=step_id, parent_id=parent_id, proposal_key=proposal_key, child_id=child.id, verdict="pass",
                        reason="ok", delta=delta, decision="niche",
                        why=f"within the noise band ({delta:+.1%}, band ±{band:.1%}) but fills the empty niche {key}")
            new.steps.append(step)
            return new, step
        return reject(f"gain {delta:+.1%} is inside the noise band (±{band:.1%})" if delta >= -band
                      else f"slower than its parent ({delta:+.1%})", "no_gain", "pass", delta)
    new.entries[child.id] = child
    if occupant is None or child.score > occupant.score:
        new.niches[key] = child.id
    ranked = sorted(set(new.elites) | {child.id}, key=lambda i: -new.entries[i].score)
    new.elites = ranked[: new.elite_size]
    step = Step(step=n, step_id=step_id, parent_id=parent_id, proposal_key=proposal_key, child_id=child.id, verdict="pass", reason="ok",
                delta=delta, decision="elite", why=f"{delta:+.1%} over its parent (noise band ±{band:.1%})")
    new.steps.append(step)
    return new, step


def was_tried_and_failed(archive: Archive, parent_id: str, proposal_key: str) -> bool:
    return proposal_key in archive.failed.get(parent_id, [])


def select_parents(archive: Archive, k: int, rng: random.Random, explore: float = 0.25) -> list[str]:
    """K parents for the next generation.

    The rule: each slot exploits with probability 1 - `explore` — the best elite not yet chosen, in rank
    order — and otherwise explores — a uniformly random niche occupant that is not an elite. Falls back to
    the other pool when one is empty; the same parent may fill several slots only when the archive has
    fewer kernels than slots."""
    if not archive.entries:
        raise ValueError("the archive is empty: seed it first")
    elites = list(archive.elites)
    explorers = [i for i in archive.niches.values() if i not in elites]
    chosen: list[str] = []
    for _ in range(k):
        pool_elite = [i for i in elites if i not in chosen]
        pool_explore = [i for i in explorers if i not in chosen]
        if pool_explore and (not pool_elite or rng.random() < explore):
            chosen.append(rng.choice(pool_explore))
        elif pool_elite:
            chosen.append(pool_elite[0])
        else:
            chosen.append(elites[len(chosen) % len(elites)])
    return chosen


def stop_reason(archive: Archive, *, plateau_steps: int = 20, roofline_target: float | None = 0.9) -> str | None:
    """Why the search should stop now (plateau or close enough to the roofline), or None."""
    best = archive.best
    if best and roofline_target is not None and best.fraction_of_floor is not None \
            and best.fraction_of_floor >= roofline_target:
        return f"the best kernel reaches {best.fraction_of_floor:.0%} of the roofline floor (target {roofline_target:.0%})"
    if len(archive.steps) >= plateau_steps:
        recent = archive.steps[-plateau_steps:]
        if not any(s.decision == "elite" for s in recent):
            return f"no improvement in the last {plateau_steps} steps"
    return None


# -- queries ----------------------------------------------------------------------------------------------


def lineage(archive: Archive, kernel: str) -> list[str]:
    """The kernel and its admitted ancestors, newest first."""
    chain = []
    while kernel and kernel in archive.entries and kernel not in chain:
        chain.append(kernel)
        kernel = archive.entries[kernel].parent_id or ""
    return chain


def lineage_history(archive: Archive, kernel: str, limit: int = 20) -> list[dict[str, Any]]:
    """The steps taken from kernels on this one's lineage, oldest first (what the strategist is shown)."""
    on_line = set(lineage(archive, kernel))
    return [{"parent": s.parent_id[:12], "proposal": s.proposal_key, "verdict": s.verdict, "reason": s.reason,
             "delta": s.delta, "decision": s.decision} for s in archive.steps if s.parent_id in on_line][-limit:]


def tried_on(archive: Archive, parent: str) -> list[str]:
    """Every proposal key already tried on this parent: a failed one must not be repeated, and a successful
    one would only rebuild a kernel the archive already judged."""
    return sorted(set(archive.failed.get(parent, [])) | {st.proposal_key for st in archive.steps if st.parent_id == parent})
