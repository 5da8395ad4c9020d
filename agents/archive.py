"""The archive: which kernels the search keeps, which it builds on next, and when it stops.

Pure decisions over plain data (pydantic models in, pydantic models out), so they are tested without a
graph, a model or a GPU. The archive keeps:

- every verified kernel it admitted (`entries`), keyed by the content hash of its source;
- elites: the best few by measured speedup;
- niches: a MAP-Elites grid over descriptors of the launched kernels (warps, stages, the largest block
  size, and the roofline side that bounds it), one occupant per cell, so the search keeps structurally
  different kernels alive and not only the current best;
- the step tuples (parent, change, child, measured delta, predicted speedup, decision), and per parent
  the proposals that failed, which are never tried on that parent again;
- verified children that could not be timed (`unmeasured`: on the CPU nothing is timed): they are not
  ranked (there is no measured gain to rank them on) and not counted as failures; they stay available as
  parents, so the next step builds on a verified idea instead of treating it as "already tried".

A child is admitted as elite or niche only if it is verified correct, its timing is not suspect, and its
gain over its parent lies outside the noise band of the measurement that produced it. Imports nothing of
kernelwright.
"""

from __future__ import annotations

from collections import Counter

import math
import random
from collections.abc import Callable
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
    measured: bool = True
    """False for a verified child that could not be timed (kept in `Archive.unmeasured`, never ranked)"""

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
    detail: str = ""
    """the verdict's detail, for a child not passed (what an evaluator's own failure was: the history says it)"""


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
    predicted_speedup: float | None = None
    """the strategist's prediction (parent time / child time)"""
    measured_speedup: float | None = None
    """what was measured: parent time / child time (None: not timed)"""
    decision: Literal["elite", "niche", "unmeasured", "rejected"]
    """elite: among the best; niche: kept for diversity; unmeasured: verified correct but not timed (kept to
    build on, never ranked); rejected: not admitted"""
    why: str
    """the decision in one sentence"""


class Archive(BaseModel):
    """The population. Treat as a value: the functions below return new archives."""

    entries: dict[str, Entry] = Field(default_factory=dict)
    elites: list[str] = Field(default_factory=list)
    niches: dict[str, str] = Field(default_factory=dict, description="cell key -> entry id")
    failed: dict[str, list[str]] = Field(default_factory=dict, description="parent id -> proposal keys that failed")
    unmeasured: list[str] = Field(default_factory=list, description="verified but untimed children, oldest first")
    revoked: dict[str, str] = Field(default_factory=dict,
                                    description="entry id -> why: admitted, then failed a later judgement (never ranked)")
    steps: list[Step] = Field(default_factory=list)
    elite_size: int = 8
    seed_origin: str = "the seed"
    """how prompts name the kernel the run started from: the seed given, or the first kernel the model wrote"""

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


def seed(archive: Archive, outcome: Outcome, origin: str | None = None) -> Archive:
    """Start the archive from a verified seed kernel; `origin` names it in prompts when it is not a seed the
    user gave (a model-written first kernel was called "the seed", which the model took for a given kernel)."""
    if outcome.verdict != "pass":
        raise ValueError(f"the seed kernel is not verified correct ({outcome.reason})")
    entry = _entry(outcome, parent=None, generation=0, proposal_key=None)
    new = archive.model_copy(deep=True)
    new.entries[entry.id] = entry
    new.elites = [entry.id]
    new.niches[_key(entry.cell)] = entry.id  # type: ignore[arg-type]
    if origin:
        new.seed_origin = origin
    return new


def _entry(outcome: Outcome, parent: Entry | None, generation: int, proposal_key: str | None) -> Entry:
    return Entry(id=outcome.child_id, parent_id=parent.id if parent else None, generation=generation,
                 median_ms=outcome.median_ms, speedup_vs_eager=outcome.speedup_vs_eager,
                 speedup_vs_compile=outcome.speedup_vs_compile, fraction_of_floor=outcome.fraction_of_floor,
                 noise_band=outcome.noise_band, cell=cell_of(outcome.kernels, outcome.bound), proposal_key=proposal_key)


def admit(archive: Archive, parent_id: str, proposal_key: str, outcome: Outcome | None,
          step_id: str | None = None, predicted: float | None = None,
          no_child: str | None = None, no_child_reason: str = "reviewer_rejected") -> tuple[Archive, Step]:
    """Record one step and decide whether the child joins the archive.

    `outcome` is None when no child was produced (the coder gave up, or `no_child` says why, with the reason
    code `no_child_reason`: "reviewer_rejected", a reviewer rejected the proposal, which is then never proposed
    on this parent again; "provider_failed", the model provider was down, which says nothing of the move and
    marks nothing as tried); `predicted` is the strategist's
    predicted speedup, recorded beside the measured one. Returns the new archive and the step."""
    parent = archive.entries[parent_id]
    new = archive.model_copy(deep=True)
    n = len(new.steps)
    timed_parent = _measured_ancestor(archive, parent)  # an unmeasured parent is compared through its timed ancestor
    measured = (timed_parent.median_ms / outcome.median_ms if outcome is not None and outcome.verdict == "pass"
                and timed_parent.median_ms and outcome.median_ms else None)

    def record(step: Step) -> tuple[Archive, Step]:
        step.predicted_speedup, step.measured_speedup = predicted, measured
        new.steps.append(step)
        return new, step

    def reject(why: str, reason: str, verdict: str = "fail", delta: float | None = None) -> tuple[Archive, Step]:
        new.failed.setdefault(parent_id, [])
        if proposal_key not in new.failed[parent_id]:
            new.failed[parent_id].append(proposal_key)
        return record(Step(step=n, step_id=step_id, parent_id=parent_id, proposal_key=proposal_key,
                           child_id=outcome.child_id if outcome else None, verdict=verdict, reason=reason, delta=delta,
                           decision="rejected", why=why))

    if outcome is None:
        if no_child and no_child_reason == "provider_failed":
            return record(Step(step=n, step_id=step_id, parent_id=parent_id, proposal_key=proposal_key, child_id=None,
                               verdict="not_run", reason=no_child_reason, decision="rejected", why=no_child))
        if no_child:
            return reject(no_child, no_child_reason)
        return reject("no child was produced", "no_child")
    if outcome.verdict == "error":
        # The judge failed, not the child: the move is not marked as tried on this parent, so it can be tried again.
        return record(Step(step=n, step_id=step_id, parent_id=parent_id, proposal_key=proposal_key,
                           child_id=outcome.child_id, verdict="error", reason=outcome.reason, decision="rejected",
                           why=f"the evaluator could not judge it ({outcome.reason}"
                               + (f": {outcome.detail[:200]}" if outcome.detail else "")
                               + "); the kernel is not to blame and the move is not counted as tried"))
    if outcome.verdict != "pass":
        return reject(f"not verified correct ({outcome.reason})", outcome.reason)
    if outcome.suspect:
        return reject(f"timing flagged as suspect: {'; '.join(outcome.suspect)}", "suspect", "pass")
    if outcome.child_id in new.entries:
        return reject("identical to a kernel already in the archive", "duplicate", "pass")
    if outcome.speedup_vs_eager is None:
        # Verified but not timed (the CPU runs Triton's interpreter): no gain to rank it on, and no failure
        # either. It is kept, unranked, so later steps can build on it; the move is not marked as failed.
        child = _entry(outcome, parent, parent.generation + 1, proposal_key)
        child.measured = False
        new.entries[child.id] = child
        new.unmeasured.append(child.id)
        return record(Step(step=n, step_id=step_id, parent_id=parent_id, proposal_key=proposal_key,
                           child_id=child.id, verdict="pass", reason="untimed", decision="unmeasured",
                           why="verified correct but not timed (no GPU timing on this device): kept unranked as a "
                               "parent for the next steps, not counted as a failure"))
    child = _entry(outcome, parent, parent.generation + 1, proposal_key)
    base = _measured_ancestor(new, parent)  # an unmeasured parent has no time: its nearest timed ancestor's counts
    delta = child.score / base.score - 1 if base.score > 0 else math.inf
    band = max(outcome.noise_band, parent.noise_band)
    key = _key(child.cell)  # type: ignore[arg-type]
    occupant = new.entries.get(new.niches.get(key, ""))
    if delta <= band:
        if occupant is None and delta >= -band:
            # Not faster, but structurally new and no slower: it opens a niche.
            new.entries[child.id] = child
            new.niches[key] = child.id
            return record(Step(step=n, step_id=step_id, parent_id=parent_id, proposal_key=proposal_key,
                               child_id=child.id, verdict="pass", reason="ok", delta=delta, decision="niche",
                               why=f"within the noise band ({delta:+.1%}, band ±{band:.1%}) but fills the empty "
                                   f"niche {key}"))
        return reject(f"gain {delta:+.1%} is inside the noise band (±{band:.1%})" if delta >= -band
                      else f"slower than its parent ({delta:+.1%})", "no_gain", "pass", delta)
    new.entries[child.id] = child
    if occupant is None or child.score > occupant.score:
        new.niches[key] = child.id
    ranked = sorted(set(new.elites) | {child.id}, key=lambda i: -new.entries[i].score)
    new.elites = ranked[: new.elite_size]
    return record(Step(step=n, step_id=step_id, parent_id=parent_id, proposal_key=proposal_key, child_id=child.id,
                       verdict="pass", reason="ok", delta=delta, decision="elite",
                       why=f"{delta:+.1%} over its parent (noise band ±{band:.1%})"))


def _measured_ancestor(archive: Archive, entry: Entry) -> Entry:
    while not entry.measured and entry.parent_id in archive.entries:
        entry = archive.entries[entry.parent_id]  # type: ignore[index]
    return entry


def select_parents(archive: Archive, k: int, rng: random.Random, explore: float = 0.25) -> list[str]:
    """K parents for the next generation.

    The rule: each slot exploits with probability 1 - `explore` — the best elite not yet chosen, in rank
    order — and otherwise explores — a uniformly random niche occupant that is not an elite. Falls back to
    the other pool when one is empty; the same parent may fill several slots only when the archive has
    fewer kernels than slots. Verified children that could not be timed and that no step has built on yet
    (`frontier`) come first among the exploiting slots, newest first: they cannot be ranked, and building on
    them is how a verified idea is carried forward instead of being tried again."""
    if not archive.entries:
        raise ValueError("the archive is empty: seed it first")
    elites = frontier(archive) + [i for i in archive.elites]
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


def frontier(archive: Archive) -> list[str]:
    """Unmeasured children no step has started from yet, newest first."""
    used = {s.parent_id for s in archive.steps}
    return [i for i in reversed(archive.unmeasured) if i not in used]


def revoke(archive: Archive, kernel: str, why: str) -> Archive:
    """The archive without `kernel` among its elites and niches: it passed once and failed a later judgement
    with fresh draws, so it is never ranked, selected or reported as best again. Its entry stays (its
    children's lineage goes through it) and `revoked` says why."""
    a = archive.model_copy(deep=True)
    a.elites = [e for e in a.elites if e != kernel]
    a.niches = {k: v for k, v in a.niches.items() if v != kernel}
    a.revoked[kernel] = why
    return a


FINAL_JUDGEMENTS = 2
"""fresh judgements the best kernel passes again when a run stops, before it is reported as the run's best"""


def recheck_best(archive: Archive, judge: Callable[[str], tuple[str, str]], *, times: int = FINAL_JUDGEMENTS,
                 limit: int = 3) -> tuple[Archive, list[str]]:
    """Judge the best kernel `times` more with fresh input draws (`judge(id) -> (verdict, detail)`) before a
    run reports it: a verifier that draws inputs at random passes a numerically fragile kernel on a lucky
    battery (a GroupNorm kernel with a one-pass variance passed two batteries in its run and failed the next
    two, on heavy-tailed draws), and a run's result must not rest on one lucky draw. A kernel that fails is
    revoked and the next best is judged, up to `limit` kernels. A judgement that errs (the evaluator, not the
    kernel) leaves the kernel as it was. Returns the archive and one sentence per kernel judged."""
    notes: list[str] = []
    for _ in range(limit):
        best = archive.best
        if best is None:
            break
        failed = None
        for i in range(times):
            verdict, detail = judge(best.id)
            if verdict == "error":
                notes.append(f"{best.id[:12]}: judgement {i + 1} of {times} could not be made ({detail}); kept, "
                             "not confirmed")
                return archive, notes
            if verdict != "pass":
                failed = f"failed judgement {i + 1} of {times} with fresh draws: {detail}"
                break
        if failed is None:
            notes.append(f"{best.id[:12]} judged again {times}x with fresh draws: passed")
            return archive, notes
        notes.append(f"{best.id[:12]} {failed}; no longer ranked")
        archive = revoke(archive, best.id, failed)
    return archive, notes


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
    return [{"step_id": s.step_id, "parent": s.parent_id[:12], "proposal": s.proposal_key, "verdict": s.verdict,
             "reason": s.reason,
             "delta": s.delta, "predicted_speedup": s.predicted_speedup, "measured_speedup": s.measured_speedup,
             "decision": s.decision, "child": (s.child_id or "")[:12] or None,
             **({"why": s.why} if s.reason == "reviewer_rejected" or s.verdict == "error" else {})}
            for s in archive.steps if s.parent_id in on_line][-limit:]


def prediction_record(archive: Archive, kernel: str) -> str:
    """How well the strategist's predictions held on this kernel's lineage, in a few lines."""
    on_line = set(lineage(archive, kernel))
    pairs = [(s.step_id or str(s.step), s.proposal_key, s.predicted_speedup, s.measured_speedup)
             for s in archive.steps if s.parent_id in on_line and s.predicted_speedup is not None]
    timed = [(p, m) for _, _, p, m in pairs if m is not None]
    if not pairs:
        return "(no predictions on this lineage yet)"
    if not timed:
        return (f"(nothing on this lineage has been timed yet: {len(pairs)} prediction(s) await a GPU measurement; "
                "the history above lists them)")
    lines = [f"{sid} {key}: predicted {p:.2f}x, measured " + (f"{m:.2f}x" if m is not None else "nothing (not timed)")
             for sid, key, p, m in pairs[-8:]]
    if timed:
        ratio = math.exp(sum(math.log(m / p) for p, m in timed if p > 0 and m > 0) / len(timed))
        lines.append(f"over {len(timed)} timed step(s), measured / predicted is {ratio:.2f} on geometric mean "
                     f"({'optimistic' if ratio < 0.97 else 'pessimistic' if ratio > 1.03 else 'well calibrated'})")
    return "\n".join(lines)


def inspirations(archive: Archive, parent: str, best: int = 2, diverse: int = 2) -> list[tuple[str, Entry]]:
    """Kernels worth showing beside the parent, each with why it is shown (never the parent or its ancestors):
    the best timed elites; niche occupants from cells other than the parent's (structural diversity), fastest first; and,
    where those leave room (on the CPU nothing is ranked), verified but untimed kernels, newest first."""
    line = set(lineage(archive, parent))  # the parent and its ancestors: the prompt shows them already
    chosen: list[tuple[str, Entry]] = [(f"elite #{r + 1}", archive.entries[i]) for r, i in enumerate(archive.elites)
                                       if i not in line and archive.entries[i].median_ms is not None][:best]
    pcell = archive.entries[parent].cell if parent in archive.entries else None
    others = [archive.entries[i] for key, i in sorted(archive.niches.items())
              if i not in line and i not in archive.elites and archive.entries[i].cell != pcell]
    others.sort(key=lambda e: -e.score)
    chosen += [("niche (structurally different)", e) for e in others[:diverse]]
    room = best + diverse - len(chosen)
    untimed = [archive.entries[i] for i in reversed(archive.unmeasured) if i not in line]
    chosen += [("verified, not timed", e) for e in untimed[:max(0, room)]]
    return chosen


def describe(archive: Archive, kernel: str) -> str:
    """One line naming a kernel for a prompt: its hash, where it came from, and what is known of its speed."""
    e = archive.entries.get(kernel)
    if e is None:
        return kernel[:12]
    made_by = next((s for s in reversed(archive.steps) if s.child_id == kernel), None)
    origin = archive.seed_origin if e.parent_id is None else (
        f"the child of step {made_by.step_id or made_by.step} ({made_by.proposal_key})" if made_by else "a child")
    speed = (f"{e.median_ms:.4g} ms" + (f", {e.speedup_vs_eager:.2f}x eager" if e.speedup_vs_eager else "")
             if e.median_ms is not None else "verified correct, not timed")
    return f"{kernel[:12]}: {origin}; {speed}"


UNJUDGED_TRIES = 2
"""steps of one move on one parent that the evaluator could not judge, after which the move counts as tried"""


def tried_on(archive: Archive, parent: str) -> list[str]:
    """Every proposal key already tried on this parent: a failed one must not be repeated, and a successful
    one would only rebuild a kernel the archive already judged."""
    # a step the evaluator could not judge, or whose model call failed, tried nothing: its move may come again (a
    # GroupNorm relay run lost three moves to an evaluator out of device memory, each then barred as tried); twice
    # unjudged on one parent, it is barred all the same (a kernel that hoards device memory makes the trusted side's
    # reference run out of it, an `error` each time, and must not be tried at every step)
    on_parent = [st for st in archive.steps if st.parent_id == parent]
    unjudged = Counter(st.proposal_key for st in on_parent if st.verdict == "error")
    return sorted(set(archive.failed.get(parent, [])) | {st.proposal_key for st in on_parent
                                                         if st.verdict not in ("error", "not_run")}
                  | {key for key, n in unjudged.items() if n >= UNJUDGED_TRIES})
