"""The builtin (no-model) policies of the analyst and the strategist.

The analyst classifies the bottleneck from what the verifier measured: roofline position, the compiled
kernels' resources and, when present, Nsight Compute's speed-of-light and occupancy. The strategist picks
one move from the catalog in `moves.py` (knobs wherever the kernel keeps them: module constants, launch
literals, constexpr defaults, autotune configs): moves that suit the diagnosis come first, moves of a kind
that paid off on this lineage rank higher, and a move already tried on this parent is never proposed again.
When single moves plateau (the caller says so) or none is left untried, pair moves (two knobs of different
categories at once) are offered too, ranked by the sum of their two moves' scores. Pure functions: the
inputs are plain dicts and models, the randomness is an explicit `random.Random`.
"""

from __future__ import annotations

import random
import re
import statistics
from typing import Any, Callable

from kernelwright.evaluators import Timing

from .archive import Archive, lineage
from .moves import AnyMove, Move, PairMove, apply, catalog, knobs, pair_catalog
from .schemas import Bottleneck, Diagnosis, Proposal

LATENCY_MS = 0.02
"""A kernel faster than this and far from its floor is limited by launch and latency, not throughput."""


def diagnose(timing: Timing | None, kernels: list[dict[str, Any]],
             ncu: list[dict[str, Any]] | None = None) -> Diagnosis:
    """Classify what limits the parent. `ncu` is a list of {"metrics": {...}} per profiled kernel."""
    evidence: list[str] = []
    spills = [(k["name"], k.get("compiled", {}).get("spills", 0)) for k in kernels if k.get("compiled", {}).get("spills")]
    if spills:
        evidence += [f"{name}: {n} register spills" for name, n in spills]
        return Diagnosis(bottleneck="spills", evidence=evidence, headroom=_headroom(timing),
                         summary="Registers spill to local memory; smaller tiles or more warps should remove it.")
    if not timing:
        return Diagnosis(bottleneck="unknown", evidence=["no GPU timing (CPU mode)"], headroom=None,
                         summary="Nothing was measured on a GPU; any knob move is a guess.")
    frac = timing.fraction_of_floor
    bound = timing.bound
    med = timing.median_ms
    if frac is not None:
        evidence.append(f"{frac:.0%} of the {bound}-bound roofline floor ({timing.floor_ms or 0:.4g} ms)")
    if med is not None:
        evidence.append(f"median {med:.4g} ms")
    m = (ncu or [{}])[0].get("metrics", {}) if ncu else {}
    kind: Bottleneck
    if m:
        mem, comp, occ = m.get("memory_sol_pct"), m.get("compute_sol_pct"), m.get("achieved_occupancy_pct")
        evidence += [f"{label} {v:.0f}%" for label, v in (("memory SOL", mem), ("compute SOL", comp),
                                                         ("achieved occupancy", occ)) if v is not None]
        if occ is not None and occ < 25 and (mem or 0) < 60 and (comp or 0) < 60:
            kind = "occupancy"
        elif (mem or 0) >= 60 and (mem or 0) >= (comp or 0):
            kind = "memory"
        elif (comp or 0) >= 60:
            kind = "compute"
        else:
            kind = "latency"
    elif med is not None and med < LATENCY_MS and (frac or 0) < 0.5:
        kind = "latency"
    else:
        kind = "memory" if bound == "memory" else "compute" if bound == "compute" else "unknown"
    summaries = {
        "memory": "Bandwidth-bound: more bytes in flight (larger tiles, deeper pipelining) should help.",
        "compute": "Compute-bound: more warps, deeper pipelining or better grouping should help.",
        "latency": "Too little work in flight per launch: smaller tiles (more programs) or fewer warps per program.",
        "occupancy": "Occupancy is low: smaller tiles or fewer stages free registers and shared memory.",
        "unknown": "No clear limit from the measurements.",
        "spills": "",
    }
    return Diagnosis(bottleneck=kind, evidence=evidence, headroom=_headroom(timing), summary=summaries[kind])


def _headroom(timing: Timing | None) -> float | None:
    frac = timing.fraction_of_floor if timing is not None else None
    return None if frac is None else max(0.0, 1.0 - min(frac, 1.0))


def move_kind(move: AnyMove) -> str:
    """A move's kind for lineage statistics: category and direction, e.g. 'tiling+' or 'warps-'; a pair's is
    its two kinds joined by '&' in sorted order, e.g. 'tiling+&warps+'."""
    if isinstance(move, PairMove):
        return "&".join(sorted(move_kind(m) for m in move.moves))
    return f"{move.category}{'+' if move.new > move.old else '-'}"


def _prior(move: AnyMove, bottleneck: Bottleneck) -> float:
    if isinstance(move, PairMove):
        return sum(_prior(m, bottleneck) for m in move.moves)
    table: dict[str, dict[str, float]] = {
        "memory": {"tiling+": 2, "pipelining+": 2, "warps+": 1},
        "compute": {"warps+": 2, "pipelining+": 2, "grouping+": 1, "tiling+": 1},
        "latency": {"tiling-": 2, "warps-": 1, "pipelining-": 1},
        "occupancy": {"tiling-": 2, "pipelining-": 2, "warps+": 1},
        "spills": {"tiling-": 3, "warps+": 2, "pipelining-": 1},
    }  # waiting (programs spinning on one another) and unknown: no knob kind is favoured
    return table.get(bottleneck, {}).get(move_kind(move), 0.0)


def _learned(move: AnyMove, lineage_gains: dict[str, list[float]]) -> float:
    """Ten times the mean measured gain of the move's kind; a pair adds its two moves' and its own kind's."""
    gains = lineage_gains.get(move_kind(move), [])
    own = statistics.fmean(gains) * 10 if gains else 0.0
    if isinstance(move, PairMove):
        own += sum(_learned(m, lineage_gains) for m in move.moves)
    return own


def propose(source: str, diagnosis: Diagnosis, lineage_gains: dict[str, list[float]], failed: set[str],
            rng: random.Random, rank: int = 0, plateaued: bool = False,
            banned: frozenset[str] = frozenset()) -> Proposal | None:
    """One move for this parent, or None when every move has been tried (`moves.no_moves_reason` says why).

    `lineage_gains` maps a move kind (see `move_kind`) to the measured gains (child/parent - 1) of earlier
    steps of that kind on this lineage. `rank` > 0 when other branches of the same generation work on the
    same parent: the rank-th best move is taken, so siblings try different moves (the last one when there
    are fewer moves than siblings). Pair moves join the single ones when `plateaued` (single moves stopped
    paying off) or when no single move is left untried. `banned` categories (a reviewer's steering) are
    never proposed, alone or in a pair."""
    def allowed(m: AnyMove) -> bool:
        cats = {x.category for x in m.moves} if isinstance(m, PairMove) else {m.category}
        return m.key not in failed and not cats & banned

    moves: list[AnyMove] = [m for m in catalog(source) if allowed(m)]
    pairs = bool(plateaued or not moves)
    if pairs:
        moves += [p for p in pair_catalog(source) if allowed(p)]
    if not moves:
        return None

    def score(m: AnyMove) -> tuple[float, float]:
        return (_prior(m, diagnosis.bottleneck) + _learned(m, lineage_gains), rng.random())

    ranked = sorted(moves, key=score, reverse=True)
    best = ranked[min(rank, len(ranked) - 1)]
    gains = lineage_gains.get(move_kind(best), [])
    predicted = 1 + max(0.02, statistics.fmean(gains) if gains else 0.05 * (1 + _prior(best, diagnosis.bottleneck)))
    if isinstance(best, PairMove):
        lead = max(best.moves, key=lambda m: _prior(m, diagnosis.bottleneck))
        category = lead.category
        note = (" Single moves have plateaued, so two knobs move at once." if plateaued
                else " Every single move from this kernel was tried, so two knobs move at once.")
    else:
        category, note = best.category, ""
    return Proposal(category=category, what=best.what,
                    why=f"{diagnosis.bottleneck} bottleneck: {diagnosis.summary}" + note
                        + (f" Moves of this kind changed time by {statistics.fmean(gains):+.1%} on this lineage."
                           if gains else ""),
                    predicted_speedup=round(predicted, 3), risk="low", key=best.key)


def move_for(source: str, proposal: Proposal) -> AnyMove:
    """The catalog move (a `Move`, or a `PairMove` for a key 'A=x,B=y') a builtin proposal names; the coder
    applies it with `moves.apply`, which takes either."""
    pool: list[AnyMove] = [*catalog(source), *pair_catalog(source)] if "," in proposal.key else [*catalog(source)]
    for m in pool:
        if m.key == proposal.key:
            return m
    raise KeyError(f"the proposal {proposal.key!r} does not apply to this source")


def apply_proposal(source: str, proposal: Proposal, any_value: bool = False) -> str:
    """The child source of a builtin proposal: `apply(source, move_for(source, proposal))`. With `any_value`
    (a person's proposal), a knob may take any value the proposal names, not only the catalog's neighbours
    (`named_move`); KeyError, saying what the builtin coder can apply, when it names none."""
    try:
        return apply(source, move_for(source, proposal))
    except KeyError:
        if not any_value:
            raise
        move = named_move(source, proposal)
        if move is None:
            raise KeyError(cannot_apply(source)) from None
        return apply(source, move)


_NAMED = re.compile(r"\b([A-Za-z_][\w.]*)\s*(?:=|:=)\s*(-?\d+)\b|\b([A-Za-z_][\w.]*)\s+-?\d+\s*(?:->|→|to)\s*(-?\d+)\b")


def named_move(source: str, proposal: Proposal) -> AnyMove | None:
    """The knob change a person's proposal names, in its key or its words: `NAME=VALUE` (two joined by a
    comma), or 'NAME 4 -> 8'. None when it names no knob of this source."""
    found = knobs(source)
    move = _parse_key(proposal.key, found)
    if move is not None:
        return move
    parts = [(m.group(1) or m.group(3), m.group(2) or m.group(4)) for m in _NAMED.finditer(proposal.what)]
    parts = [(k, v) for k, v in parts if k in found]
    return _parse_key(",".join(f"{k}={v}" for k, v in parts[:2]), found) if parts else None


def cannot_apply(source: str) -> str:
    """Why the builtin coder cannot apply a proposal, in one sentence, with this source's knobs."""
    found = knobs(source)
    listed = ", ".join(f"{k}={kn.value}" for k, kn in list(found.items())[:8]) or "none"
    return ("the builtin coder applies knob changes only (NAME=VALUE, or 'NAME 4 -> 8'): name a knob of the "
            f"parent and its new value (its knobs: {listed}), give the kernel itself, or run with a model as coder")


def _parse_key(key: str, found: dict) -> AnyMove | None:
    moves: list[Move] = []
    for part in key.split(","):
        knob, _, new = part.partition("=")
        k = found.get(knob)
        if k is None or not new.lstrip("-").isdigit():
            return None
        moves.append(Move(knob, k.value, int(new), k.category))
    if len(moves) == 1:
        return moves[0]
    if len(moves) == 2:
        first, second = sorted(moves, key=lambda m: m.key)
        return PairMove(first, second)
    return None


def lineage_gains(archive: Archive, kernel: str, source_of: Callable[[str], str]) -> dict[str, list[float]]:
    """Measured gains by move kind over the steps whose parent lies on this kernel's lineage (`source_of`
    gives a kernel's source by hash). A pair step counts under its pair kind ('tiling+&warps+') only: its
    gain cannot be split between its two moves, and `propose` adds the pair kind's gains to a pair's score
    on top of its two single kinds'. Keys that name no knob of the parent (e.g. an LLM's) are skipped."""
    on_line = set(lineage(archive, kernel))
    gains: dict[str, list[float]] = {}
    for step in archive.steps:
        if step.parent_id not in on_line or step.delta is None or "=" not in step.proposal_key:
            continue
        move = _parse_key(step.proposal_key, knobs(source_of(step.parent_id)))
        if move is None:
            continue
        gains.setdefault(move_kind(move), []).append(step.delta)
    return gains
