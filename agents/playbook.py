"""What the strategist is told is known to work: a few entries of the shipped playbook and of the knowledge store
(what earlier runs measured), chosen by the problem's kinds and the diagnosis, each labelled with the GPU it was
measured on; and the recording of a run's winning steps into that store.

The shipped playbook is data (`prompts/playbook.toml`, validated here as `PlaybookEntry`); the problem's kinds
come from `evaluators.kinds`; the store is `tools.knowledge`. `playbook_for` is a pure function over them, so the
choice is tested without a run; `for_strategist` and `remember` are the two places a run touches it.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError

from kernelwright import prompts
from kernelwright.evaluators import pyast
from kernelwright.evaluators.kinds import problem_kinds
from kernelwright.tools.knowledge import (EVIDENCE_CHARS, EVIDENCE_LINES, WHAT_CHARS, Knowledge, KnowledgeStore, now,
                                          problem_name, shorten)
from kernelwright.tools.runstore import Run, RunError

from .briefing import PLAYBOOK_CHARS, clip
from .schemas import Diagnosis

if TYPE_CHECKING:
    from .archive import Archive, Step
    from .context import RunContext

log = logging.getLogger(__name__)

SHIPPED_LIMIT = 4
"""shipped entries shown at most"""
LEARNED_LIMIT = 3
"""entries of earlier runs shown at most"""


class PlaybookEntry(BaseModel):
    """One entry of the shipped playbook: a pattern (symptom -> move) and what it did where it was measured."""

    id: str
    kinds: list[str] = Field(description="problem kinds it applies to (evaluators.kinds), or 'any'")
    bottlenecks: list[str] = Field(description="the Diagnosis.bottleneck values it answers")
    keywords: list[str] = Field(default_factory=list, description="words of a diagnosis that point at it")
    source_words: list[str] = Field(default_factory=list, description=(
        "when given, the entry applies only to a problem whose reference source names one of them (a softmax's "
        "online statistics to a softmax or log-sum-exp, not to a group norm)"))
    max_programs_per_sm: float | None = Field(default=None, description=(
        "when given, the entry applies only while the parent's largest launch has at most this many programs per "
        "SM (splitting starved rows helps a grid of 16 programs, not one of 918k); unknown grids do not exclude"))
    not_persistent: bool = Field(default=False, description=(
        "when true, the entry does not apply to a persistent parent (its source strides its programs over the work "
        "with `tl.num_programs`, or takes work by ticket): its grid is sized to the GPU, not the work, so few "
        "programs per SM are not starved rows (a relay model on an L2 norm of 32768 rows, one program per SM, "
        "was offered the split of starved rows, 2026-11-26)"))
    category: str
    symptom: str
    move: str
    effect: str
    sources: list[str] = Field(description="its rows in BENCHMARKS.md: 'P probe' or 'L problem'")
    gpu: str
    torch: str = ""
    triton: str = ""
    section: str = ""


@cache
def shipped() -> tuple[PlaybookEntry, ...]:
    """The shipped playbook's entries, in their file's order, each with the GPU and versions it was measured on."""
    data = prompts.playbook_data()
    on = data.get("measured_on") or {}
    return tuple(PlaybookEntry.model_validate({**on, **(e.get("measured_on") or {}),
                                               **{k: v for k, v in e.items() if k != "measured_on"}})
                 for e in data.get("entry") or [])


def gpu_short(name: str | None) -> str:
    """A GPU's name as people say it: 'NVIDIA H100 80GB HBM3' -> H100, 'NVIDIA GeForce RTX 4090' -> RTX 4090,
    'CPU (Triton interpreter)' -> CPU."""
    words = re.sub(r"\b(NVIDIA|GeForce|Tesla|Quadro)\b", " ", name or "").split()
    if not words:
        return "an unknown device"
    if words[0] in ("RTX", "GTX", "TITAN") and len(words) > 1:
        return f"{words[0]} {words[1]}"
    return words[0]


def _an(short: str) -> str:
    """'an H100', 'an A100', 'a B200', 'the CPU'."""
    if short == "CPU":
        return "the CPU"
    if short.startswith("an unknown"):
        return short
    return ("an " if short[:1].upper() in "AEFHILMNORSX" else "a ") + short


def _where(measured_on: str, run_gpu: str | None) -> str:
    """'on an H100' or 'on an H100; this run is on an H200' (or '... on the CPU, where nothing is timed')."""
    here, there = gpu_short(run_gpu), gpu_short(measured_on)
    said = f"measured on {_an(there)}"
    if run_gpu is None or here == there:
        return said
    if here == "CPU":
        return f"{said}; this run is on the CPU, where nothing is timed"
    return f"{said}; this run is on {_an(here)}"


def _words(diagnosis: Diagnosis | None) -> str:
    return " ".join([diagnosis.summary, *diagnosis.evidence]).lower() if diagnosis is not None else ""


COMPUTE_KINDS = frozenset({"matmul", "conv"})
"""kinds whose math takes a problem's time when present: with one of them, an entry only for the problem's other
kinds (a row reduction in a GEMM's epilogue) speaks of the epilogue"""
EPILOGUE_HITS = 2
"""diagnosis words an epilogue-only entry must match to be shown (one generic word such as "grid" is not enough)"""
EPILOGUE_LIMIT = 1
"""epilogue-only entries shown at most on a problem with a compute kind: the GEMM's entries are its playbook; one
entry may speak of the reduction after it (level2/37's strategist was shown a softmax/layer-norm entry, issue 23)"""


def _shipped_score(e: PlaybookEntry, kinds: set[str], diagnosis: Diagnosis | None) -> int | None:
    """How well a shipped entry fits (None: not this problem's kind): its kind, the bottleneck, the words.

    On a problem with a compute kind (a GEMM with a group norm after it), an entry for none of its compute kinds
    is about the epilogue: ranked after every entry for the GEMM (so in the few slots left, if any) and only when
    the diagnosis names what it answers (`EPILOGUE_HITS` of its words). On level2/37 (issue 23) the standalone row
    reduction's entries (split long rows over many programs, fewer rows per program) filled half of a GEMM
    strategist's playbook."""
    specific = bool(set(e.kinds) & kinds)
    if not specific and "any" not in e.kinds and kinds:
        return None
    text = _words(diagnosis)
    hits = min(3, sum(1 for k in e.keywords if k in text))
    lead = kinds & COMPUTE_KINDS
    if lead and "any" not in e.kinds and not set(e.kinds) & lead:
        return hits - 3 if hits >= EPILOGUE_HITS else None
    score = 2 if specific else 1
    if diagnosis is not None and diagnosis.bottleneck in e.bottlenecks:
        score += 2
    return score + hits


def _learned_score(k: Knowledge, kinds: set[str], diagnosis: Diagnosis | None, run_gpu: str | None) -> int | None:
    """How well an earlier run's entry fits (None: not this problem's kind)."""
    shared = set(k.kinds) & kinds
    if kinds and not shared:
        return None
    score = len(shared)
    if diagnosis is not None and k.bottleneck == diagnosis.bottleneck:
        score += 2
    if run_gpu and gpu_short(k.gpu) == gpu_short(run_gpu):
        score += 1
    return score


def _callee(node: ast.AST) -> str:
    """The last name of a call's function (`tl.program_id` -> program_id, `range` -> range)."""
    f = node.func if isinstance(node, ast.Call) else None
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def persistent(source: str) -> bool:
    """Whether a kernel's programs take their work in turn, so that its grid is sized to the GPU, not to the work:
    a loop that starts at the program's id and steps by something other than a number (`tl.num_programs(0)`, an
    SM count: a grid-stride loop), or a ticket (`t = tl.atomic_add(counter, 1)`). A 2-D grid that reads
    `tl.num_programs(1)` for its layout, or atomics that add partial sums, are not."""
    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError):
        return False
    pids = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and _callee(n.value) == "program_id"
            for t in n.targets if isinstance(t, ast.Name)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and _callee(n.value) == "atomic_add" and len(n.value.args) >= 2 \
                and isinstance(n.value.args[1], ast.Constant) and n.value.args[1].value == 1:
            return True
        if isinstance(n, ast.For) and _callee(n.iter) in ("range", "static_range") and len(n.iter.args) == 3:
            start, step = n.iter.args[0], n.iter.args[2]
            from_pid = any(_callee(m) == "program_id" or (isinstance(m, ast.Name) and m.id in pids)
                           for m in ast.walk(start))
            if from_pid and not isinstance(step, ast.Constant):
                return True
    return False


def applies(e: PlaybookEntry, source: str | None = None, programs: int | None = None, sms: int | None = None,
            parent_source: str | None = None) -> bool:
    """Whether an entry's conditions hold for this problem and parent: the reference source names one of its
    `source_words`, the parent's largest launch is within `max_programs_per_sm`, and a `not_persistent` entry's
    parent is not persistent by its source (`persistent`: its grid is sized to the GPU and its programs loop over
    the rows; the grid alone cannot tell that from as many rows as SMs, one program each); each is checked only
    when known. On level1/35_GroupNorm_ a model was offered a softmax's one-pass statistics and the split of
    starved rows for a grid of 918k programs (issue 23's repeat)."""
    if e.source_words and source is not None and not any(w in source.lower() for w in e.source_words):
        return False
    if e.max_programs_per_sm is not None and programs and sms and programs > e.max_programs_per_sm * sms:
        return False
    if e.not_persistent and parent_source is not None and persistent(parent_source):
        return False
    return True


def choose_shipped(kinds: Iterable[str], diagnosis: Diagnosis | None, limit: int = SHIPPED_LIMIT, *,
                   source: str | None = None, programs: int | None = None,
                   sms: int | None = None, parent_source: str | None = None) -> list[PlaybookEntry]:
    """The shipped entries for a problem of `kinds` with this diagnosis: of its kinds only, whose conditions hold
    (`applies`: the reference `source`, the parent's largest grid in `programs`, the GPU's `sms`), best fit first
    (ties in the file's order), at most `limit`; on a problem with a compute kind at most `EPILOGUE_LIMIT` entries
    that are only for its other kinds (`_shipped_score` puts them after the compute kind's)."""
    ks = set(kinds)
    scored = [(s, i, e) for i, e in enumerate(shipped())
              if applies(e, source, programs, sms, parent_source) and (s := _shipped_score(e, ks, diagnosis)) is not None]
    lead = ks & COMPUTE_KINDS
    out: list[PlaybookEntry] = []
    epilogue = 0
    for _, _, e in sorted(scored, key=lambda t: (-t[0], t[1])):
        if lead and "any" not in e.kinds and not set(e.kinds) & lead:
            if epilogue >= EPILOGUE_LIMIT:
                continue
            epilogue += 1
        out.append(e)
    return out[:limit]


def choose_learned(kinds: Iterable[str], diagnosis: Diagnosis | None, entries: Sequence[Knowledge],
                   run_gpu: str | None = None, limit: int = LEARNED_LIMIT,
                   exclude_run: str | None = None, problem: str | None = None) -> list[Knowledge]:
    """Earlier runs' entries for a problem of `kinds` with this diagnosis: of its kinds only, not of the run
    `exclude_run` (its own steps are in its history already), those of the same `problem` (its name) first when
    given, then best fit, then the larger gain, then the newer; one per move and problem; at most `limit`."""
    ks = set(kinds)
    scored = [(s, k) for k in entries if k.run_id != exclude_run
              and (s := _learned_score(k, ks, diagnosis, run_gpu)) is not None]
    scored.sort(key=lambda t: t[1].date, reverse=True)  # the newer first among equals (the sort below is stable)
    scored.sort(key=lambda t: (problem is None or t[1].problem != problem, -t[0], -t[1].speedup))
    out: list[Knowledge] = []
    seen: set[tuple[str, str]] = set()
    for _, k in scored:
        if (k.key.lower(), k.problem) in seen:
            continue
        seen.add((k.key.lower(), k.problem))
        out.append(k)
        if len(out) >= limit:
            break
    return out


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %" if x >= 0.1 else f"{x * 100:.1f} %"


def provenance(k: Knowledge, run_gpu: str | None = None) -> str:
    """'run 20261126-043312-a1b2c3, step g1b0, on an H200' (and whether this run's GPU differs)."""
    where = _where(k.gpu, run_gpu).removeprefix("measured ")
    return f"run {k.run_id}, step {k.step_id}, {where}"


def render_learned(k: Knowledge, run_gpu: str | None = None) -> str:
    """One earlier run's entry in a line: its provenance, the symptom, the move and its measured effect."""
    effect = [f"{k.speedup:.2f}x over its parent (noise ±{_pct(k.noise_band)})"]
    if k.child_ms is not None:
        effect.append(f"{k.child_ms:.4g} ms")
    if k.vs_compile is not None:
        effect.append(f"{k.vs_compile:.2f}x torch.compile")
    if k.fraction_of_floor is not None:
        effect.append(f"{_pct(k.fraction_of_floor)} of the floor")
    # whole as stored (`knowledge_entry` bounds them at a clause); the bounds again for an entry edited by hand
    evidence = shorten(k.evidence[0], EVIDENCE_CHARS) if k.evidence else ""
    what = shorten(k.what, WHAT_CHARS)
    return (f"- {provenance(k, run_gpu)}, problem {k.problem} ({', '.join(k.kinds) or 'kind unknown'}): "
            f"diagnosed {k.bottleneck}{f' ({evidence})' if evidence else ''} -> {k.category} {k.key}"
            f"{f': {what}' if what else ''} -> {', '.join(effect)}")


def render_shipped(i: int, e: PlaybookEntry, run_gpu: str | None = None) -> str:
    """One shipped entry in a line: its pattern, its effect and where it was measured (its BENCHMARKS.md rows stay
    in the data: a benchmark problem's name would tell the model nothing it can use, and might tell it an answer)."""
    versions = ", ".join(f"{name} {v}" for name, v in (("torch", e.torch), ("triton", e.triton)) if v)
    return (f"{i}. [{e.id}] {e.symptom} -> {e.move} ({e.category}). What it did: {e.effect} "
            f"({_where(e.gpu, run_gpu)}{f'; {versions}' if versions else ''})")


LEARNED_HEAD = "From earlier runs on this machine (the knowledge store; what their steps measured):"


def fit_entries(head: list[str], groups: Sequence[tuple[str, list[str]]], limit: int) -> str:
    """The lines `head`, then each group's heading and its entries (one line each, best first), within `limit`
    characters: while they do not fit, the last entry of the group showing the most is left out (the shipped
    playbook and the earlier runs keep a share each), and a line says how many were; an entry is never cut
    (a model shown 'BLOCK 40…' could not use it, issue 23). `clip` remains the guard for a head too long."""
    shown = [list(lines) for _, lines in groups]
    dropped = 0

    def text() -> str:
        out = list(head)
        for (heading, _), lines in zip(groups, shown):
            if lines:
                out += [heading, *lines]
        if dropped:
            out.append(f"({dropped} more {'entry' if dropped == 1 else 'entries'} not shown: this block is bounded)")
        return "\n".join(out)

    while len(text()) > limit and any(shown):
        max(reversed(shown), key=len).pop()  # the longest group; among equals the later one (the earlier runs)
        dropped += 1
    return clip(text(), limit)


def playbook_for(kinds: Iterable[str], diagnosis: Diagnosis | None, gpu_name: str | None,
                 knowledge_entries: Sequence[Knowledge] = (), limit: int = SHIPPED_LIMIT,
                 learned_limit: int = LEARNED_LIMIT, exclude_run: str | None = None, *, source: str | None = None,
                 programs: int | None = None, sms: int | None = None, parent_source: str | None = None) -> str:
    """The strategist's block of what is known to work here: at most `limit` shipped entries and `learned_limit`
    entries of earlier runs, chosen by the problem's `kinds` and the `diagnosis`, each labelled with the GPU it
    was measured on (and this run's, `gpu_name`, where it differs). Bounded by `briefing.PLAYBOOK_CHARS`."""
    ks = list(dict.fromkeys(kinds))
    chosen = choose_shipped(ks, diagnosis, limit, source=source, programs=programs, sms=sms,
                            parent_source=parent_source)
    learned = choose_learned(ks, diagnosis, knowledge_entries, gpu_name, learned_limit, exclude_run)
    bottleneck = diagnosis.bottleneck if diagnosis is not None else "unknown"
    lines = [f"Chosen for a problem of kind {', '.join(ks) or 'unknown'}, diagnosed {bottleneck}. Effects vary with "
             "the problem and the GPU: measure, do not assume."]
    if not chosen and not learned:
        lines.append("(nothing in the shipped playbook or in earlier runs matches this problem's kind)")
    return fit_entries(lines, [("From the shipped playbook:", [render_shipped(i, e, gpu_name)
                                                              for i, e in enumerate(chosen, 1)]),
                               (LEARNED_HEAD, [render_learned(k, gpu_name) for k in learned])], PLAYBOOK_CHARS)


# -- the run's side ------------------------------------------------------------------------------------------


def _run_gpu(ctx: RunContext, branch: int) -> str | None:
    try:
        return ctx.evaluations.facts(ctx.config.device_for(branch)).name
    except Exception:  # noqa: BLE001 - facts are informative; the playbook is chosen without the label then
        return None


def _kinds(run: Run) -> list[str]:
    return list(problem_kinds(run.problem_source(), run.info().problem))


def for_strategist(ctx: RunContext, state: dict[str, Any]) -> str:
    """The playbook block for one strategist call: the problem's kinds, the branch's diagnosis, this run's GPU
    and (unless the run leaves it out, `use_knowledge`) the knowledge store's entries of other runs."""
    cfg = ctx.config
    entries: list[Knowledge] = []
    if cfg.use_knowledge:
        entries = KnowledgeStore(cfg.knowledge).entries()
    d = state.get("diagnosis")
    programs, sms = _grid_and_sms(ctx, state)
    return playbook_for(_kinds(ctx.run), Diagnosis.model_validate(d) if d else None,
                        _run_gpu(ctx, state.get("branch") or 0), entries, exclude_run=ctx.run.id,
                        source=ctx.run.problem_source(), programs=programs, sms=sms,
                        parent_source=_parent_source(ctx, state))


def for_writer(ctx: RunContext) -> str:
    """What earlier runs learned, for the first-kernel writer: the knowledge store's entries of the problem's kinds
    (those of the same problem first, then by measured gain; there is no diagnosis yet), at most `LEARNED_LIMIT`,
    rendered as the strategist's block of earlier runs is, each labelled with the GPU it was measured on against
    this run's. Empty when the run leaves the store out (`use_knowledge`) or nothing in it applies. The shipped
    playbook is the strategist's, chosen by a diagnosis: not shown here."""
    cfg = ctx.config
    if not cfg.use_knowledge:
        return ""
    try:
        entries = KnowledgeStore(cfg.knowledge).entries()
        if not entries:
            return ""
        gpu = _run_gpu(ctx, 0)
        learned = choose_learned(_kinds(ctx.run), None, entries, gpu, LEARNED_LIMIT, exclude_run=ctx.run.id,
                                 problem=problem_name(ctx.run.info().problem))
    except Exception as e:  # noqa: BLE001 - a memory of earlier runs: without it the writer still writes
        log.warning("the knowledge store's entries could not be chosen for the first kernel: %s: %s",
                    type(e).__name__, e)
        return ""
    if not learned:
        return ""
    return fit_entries([], [(LEARNED_HEAD, [render_learned(k, gpu) for k in learned])], PLAYBOOK_CHARS)


def _parent_source(ctx: RunContext, state: dict[str, Any]) -> str | None:
    try:
        return ctx.run.kernel(state["parent"])
    except Exception:  # noqa: BLE001 - informative: the entries are chosen without it then
        return None


def _grid_and_sms(ctx: RunContext, state: dict[str, Any]) -> tuple[int | None, int | None]:
    """The parent's largest launch in programs (from its verdict) and the GPU's SM count, where known."""
    programs = sms = None
    try:
        data = ctx.run.eval(state["parent"]) or {}
        sizes = [math.prod(g) for k in data.get("kernels") or [] for g in k.get("grids") or [] if g]
        programs = max(sizes) if sizes else None
    except Exception:  # noqa: BLE001 - informative: the entries are chosen without the grid then
        pass
    try:
        sms = ctx.evaluations.facts(ctx.config.device_for(state.get("branch") or 0)).sms
    except Exception:  # noqa: BLE001
        pass
    return programs, sms


def winning(step: Step, archive: Archive, noise_band: float) -> bool:
    """A step whose child became an elite with a measured gain beyond the noise band (the child's and its
    parent's, whichever is wider): what the store keeps."""
    if step.decision != "elite" or step.measured_speedup is None:
        return False
    parent = archive.entries.get(step.parent_id)
    band = max(noise_band, parent.noise_band if parent is not None else 0.0)
    return step.measured_speedup - 1 > band


def knowledge_entry(run: Run, result: Mapping[str, Any], step: Step, archive: Archive, *,
                    versions: Mapping[str, str], gpu: str | None, strategist: str, date: str | None = None) -> Knowledge:
    """The store's entry for a winning step: the one construction that `remember` (as the run goes) and `learn`
    (later, from the run's records) share, so an entry learned from a run's folder is the one the run would have
    kept. `result` holds the step's proposal, diagnosis, outcome and coder (as dicts: a live result or a trace
    record); `versions` are the child's verdict's (its GPU when it names one, else `gpu`); the noise band is the
    child's or its parent's (`archive`), the wider, as `winning` judged it; `strategist` is the model that proposed
    the move (a person's kernel says human); `date` defaults to now."""
    outcome, proposal = result.get("outcome") or {}, result.get("proposal") or {}
    diagnosis, coder = result.get("diagnosis") or {}, result.get("coder") or {}
    parent = archive.entries.get(step.parent_id)
    return Knowledge(
        id=f"{run.id}/{step.step_id}", date=date or now(), run_id=run.id, step_id=step.step_id or str(step.step),
        problem=problem_name(run.info().problem), kinds=_kinds(run),
        gpu=versions.get("gpu") or gpu or "unknown",
        versions={k: versions[k] for k in ("torch", "triton") if k in versions},
        bottleneck=str(diagnosis.get("bottleneck") or "unknown"),
        evidence=[shorten(str(x), EVIDENCE_CHARS) for x in (diagnosis.get("evidence") or [])[:EVIDENCE_LINES]],
        category=str(proposal.get("category") or "other"), key=step.proposal_key,
        what=shorten(str(proposal.get("what") or ""), WHAT_CHARS), speedup=float(step.measured_speedup or 1.0),
        noise_band=max(float(outcome.get("noise_band") or 0.0), parent.noise_band if parent is not None else 0.0),
        child_ms=outcome.get("median_ms"), vs_compile=outcome.get("speedup_vs_compile"),
        fraction_of_floor=outcome.get("fraction_of_floor"),
        policy="human" if coder.get("policy") == "human" else strategist)


def remember(ctx: RunContext, result: dict[str, Any], step: Step, archive: Archive) -> Knowledge | None:
    """After the archive admitted a step (`roles.archive_step`): keep it in the knowledge store when it won
    (`winning`) and the run uses the store. The entry or None. A store that cannot be written is logged: the
    run goes on."""
    cfg = ctx.config
    outcome = result.get("outcome") or {}
    if not cfg.use_knowledge or not result.get("proposal") or \
            not winning(step, archive, float(outcome.get("noise_band") or 0.0)):
        return None  # a kernel a person gave, with no proposal, names no move to remember
    try:
        verdict = ctx.evaluations.cached(step.child_id or "")
        versions = dict(verdict.versions) if verdict is not None else {}
        gpu = None if versions.get("gpu") else _run_gpu(ctx, result.get("branch") or 0)
        entry = knowledge_entry(ctx.run, result, step, archive, versions=versions, gpu=gpu,
                                strategist=cfg.model_for("strategist"))
        KnowledgeStore(cfg.knowledge).append(entry)
        return entry
    except Exception as e:  # noqa: BLE001 - the store is a memory for later runs: failing it must not end this one
        log.warning("could not record step %s in the knowledge store: %s: %s", step.step_id, type(e).__name__, e)
        return None


class Learned(BaseModel):
    """What `learn` took from one run's records."""

    added: list[Knowledge] = Field(default_factory=list)
    """the entries added to the store"""
    already: int = 0
    """winning steps whose entries the store held already (by id)"""
    not_won: int = 0
    """steps that did not win (`winning`), or named no move (a person's kernel, no proposal)"""
    unreadable: int = 0
    """step records that could not be read (their decision is missing or malformed)"""


def run_archive(run: Run) -> Archive:
    """The run's last stored archive; without one (a run killed before its first generation was stored), the noise
    bands its trace's children were measured with, so that each step's parent band is still known where the
    parent is a child of the run (a seed's band is then taken as 0)."""
    from .archive import Archive, Entry

    versions = sorted(int(p.stem) for p in (run.path / "archive").glob("*.json") if p.stem.isdigit())
    for v in reversed(versions):
        try:
            return Archive.model_validate(run.archive(v))
        except (RunError, ValidationError):
            continue
    entries = {}
    for r in run.trace():
        o = r.get("outcome") if isinstance(r, dict) else None
        if isinstance(o, dict) and o.get("child_id"):
            entries[o["child_id"]] = Entry(id=o["child_id"], noise_band=float(o.get("noise_band") or 0.0))
    return Archive(entries=entries)


def run_gpu_named(run: Run) -> str | None:
    """The GPU a finished run's device facts name (`devices/*.json`), when they name one GPU: what `remember` asks the
    live evaluation service for when a verdict names none."""
    names = set()
    for p in (run.path / "devices").glob("*.json"):
        try:
            name = json.loads(p.read_text()).get("name")
        except (OSError, ValueError, AttributeError):
            continue
        if name:
            names.add(str(name))
    return names.pop() if len(names) == 1 else None


def learn(run: Run, store: KnowledgeStore) -> Learned:
    """Add to `store` an entry for every step of a finished or stopped run (its `trace.jsonl`) that won, as `remember`
    would have built it, skipping ids the store holds: a run made on a GPU host given back, or with
    `--no-knowledge`, kept nothing. The entry's date is the step's. A RunError when the run has no step record."""
    from .archive import Step

    records = run.trace()
    if not records:
        raise RunError(f"run {run.id} ({run.path}) has no step records (trace.jsonl): nothing to learn from")
    archive = run_archive(run)
    held = {e.id for e in store.entries()}
    out = Learned()
    gpu: str | None = None
    for r in records:
        try:  # a record is the run's file, possibly hand-edited or cut short: one that cannot be read is counted
            step = Step.model_validate(r.get("decision"))
            outcome = r.get("outcome") or {}
            if not r.get("proposal") or not winning(step, archive, float(outcome.get("noise_band") or 0.0)):
                out.not_won += 1
                continue
            if f"{run.id}/{step.step_id}" in held:
                out.already += 1
                continue
            versions = {str(k): str(v) for k, v in ((run.eval(step.child_id or "") or {}).get("versions") or {}).items()}
            if not versions.get("gpu") and gpu is None:
                gpu = run_gpu_named(run)
            models = r.get("role_models") or {}
            entry = knowledge_entry(run, r, step, archive, versions=versions, gpu=gpu,
                                    strategist=models.get("strategist") or r.get("policy") or "unknown",
                                    date=r.get("time") or None)
        except (ValidationError, ValueError, TypeError, AttributeError, RunError):
            out.unreadable += 1
            continue
        store.append(entry)
        held.add(entry.id)
        out.added.append(entry)
    return out
