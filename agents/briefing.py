"""What the language-model roles are shown beside the parent, each piece bounded: the device's facts, the
parent's evidence (rendered profile), inspirations from the archive (the best and a few diverse kernels,
as diffs against the parent with their measured numbers), how the strategist's predictions held on this
lineage, the history of the lineage, and the playbook.

Pure text assembly over plain data; the roles fetch the data (`roles/`) and the prompts place the text. Every
prompt a model role is sent is assembled here (`analyst_prompt`, `strategist_prompt`, `coder_prompt`,
`writer_prompt`) from `prompts/` and these pieces; `llm.py` only calls the models. The evaluators render their
own data (the profile, the device's facts) for the pieces.
The bounds are characters (about four per token): the strategist's prompt, beyond the problem's and the
parent's sources, stays under `STRATEGIST_EXTRA_CHARS`; the coder's under `CODER_EXTRA_CHARS`.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Callable

from kernelwright import prompts
from kernelwright.evaluators import EvalResult

from .schemas import Diagnosis, Proposal

FACTS_CHARS = 900
EVIDENCE_CHARS = 2500
INSPIRATIONS_CHARS = 6000
"""all inspirations together, for the strategist"""
CODER_INSPIRATIONS_CHARS = 3000
ONE_INSPIRATION_CHARS = 2200
HISTORY_CHARS = 2500
PREDICTIONS_CHARS = 800
PLAYBOOK_CHARS = 5000
STRATEGIST_EXTRA_CHARS = 24_000
"""about 6,000 tokens: everything the strategist is shown beyond the problem's and the parent's sources"""
CODER_EXTRA_CHARS = 10_000
"""about 2,500 tokens: everything the coder is shown beyond the problem's and the parent's sources"""


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 16] + "\n… [truncated]"


def inspiration_items(pairs: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """The archive's (why shown, entry) pairs as small plain dicts for the branch state."""
    return [{"id": e.id, "shown_as": why, "median_ms": e.median_ms, "speedup_vs_eager": e.speedup_vs_eager,
             "speedup_vs_compile": e.speedup_vs_compile, "fraction_of_floor": e.fraction_of_floor,
             "change": e.proposal_key} for why, e in pairs]


def _numbers(item: dict[str, Any]) -> str:
    if item.get("median_ms") is None:
        return "verified correct, not timed"
    bits = [f"{item['median_ms']:.4g} ms"]
    for key, label in (("speedup_vs_eager", "× eager"), ("speedup_vs_compile", "× torch.compile")):
        if item.get(key):
            bits.append(f"{item[key]:.2f}{label}")
    if item.get("fraction_of_floor"):
        bits.append(f"{item['fraction_of_floor']:.0%} of the floor")
    return ", ".join(bits)


def render_inspirations(items: list[dict[str, Any]], parent_id: str, parent_src: str,
                        source_of: Callable[[str], str], limit: int = INSPIRATIONS_CHARS) -> str:
    """Each inspiration as a header (why shown, its numbers, the change that made it) and its unified diff
    against the parent, each diff clipped, the whole clipped to `limit`."""
    if not items:
        return "(none yet: the archive holds only this lineage)"
    blocks = []
    for it in items:
        try:
            src = source_of(it["id"])
        except (KeyError, FileNotFoundError, OSError):
            continue
        diff = "".join(difflib.unified_diff(parent_src.splitlines(keepends=True), src.splitlines(keepends=True),
                                            f"parent {parent_id[:12]}", f"{it['id'][:12]}", n=2))
        head = (f"### {it['id'][:12]} — {it['shown_as']}: {_numbers(it)}"
                + (f"; made by the change {it['change']}" if it.get("change") else ""))
        blocks.append(head + "\n```diff\n" + clip(diff or "(identical to the parent)\n", ONE_INSPIRATION_CHARS)
                      + "```")
    return clip("\n".join(blocks), limit) if blocks else "(none)"


def render_history(history: list[dict[str, Any]], limit: int = HISTORY_CHARS) -> str:
    """The lineage's steps, newest last, one line each (the oldest dropped first when over `limit`)."""
    if not history:
        return "(none yet)"
    lines = []
    for h in history:
        bits = [f"{h.get('proposal')}: {h.get('decision')}"]
        if h.get("decision") == "unmeasured":
            bits.append(f"verified, not timed (child {h.get('child')}, available to build on)")
        elif h.get("why"):
            bits.append(h["why"])
        elif h.get("verdict") != "pass":
            bits.append(f"{h.get('verdict')} ({h.get('reason')})")
        if h.get("as_written_speedup") is not None and h.get("measured_speedup") is not None:
            bits.append(f"as written {h['as_written_speedup']:.3f}×, {h['measured_speedup']:.3f}× after the builtin "
                        f"tuned it ({h.get('tuned')})")
        elif h.get("measured_speedup") is not None:
            bits.append(f"measured {h['measured_speedup']:.3f}×")
        if h.get("predicted_speedup") is not None:
            bits.append(f"predicted {h['predicted_speedup']:.2f}×")
        if h.get("launched"):
            bits.append(f"child launched {h['launched']}")
        if h.get("profiled"):
            bits.append(f"child's Nsight Compute, its longest kernel: {h['profiled']}")
        lines.append("- " + "; ".join(bits))
    while len("\n".join(lines)) > limit and len(lines) > 1:
        lines.pop(0)
    return "\n".join(lines)


# -- the role prompts: every prompt a model role is sent is assembled here ---------------------------------------

# what the check does on this run's device; how the shape variants are made and that finish() runs the check
# itself are said once, in the tools' own descriptions (tools/coding.py), which every coder request carries
_SHAPES = " `shapes` adds the variants its description names."
QUICK_CHECK_CPU = ("run the verifier on the current kernel (Triton's interpreter on the CPU: every correctness "
                   "trial and guard; nothing is timed) at the problem's own shapes." + _SHAPES)
QUICK_CHECK_GPU = ("compile the current kernel and run it on the GPU on one input set of each family (base, sign-flipped, "
                   "rescaled, heavy-tailed) plus the problem's test "
                   "inputs, with every guard, against the reference, and time it roughly at the problem's size (one "
                   "measurement, labelled rough, never used to admit anything; seconds in all), and say what it "
                   "compiled to: each kernel's registers, spills and warps, the programs an SM holds at once and the "
                   "waves its grid makes." + _SHAPES)


def coverage_note(problem: str) -> str:
    """What the quick check exercises beyond the problem's own shapes, said plainly for the coder."""
    if re.search(r"^def get_test_inputs\(", problem, re.M):
        return ("The quick check also runs the problem's get_test_inputs() shapes, so general paths (a tail "
                "block, more than one chunk) are exercised.")
    return ("This problem gives no get_test_inputs(): the quick check at its own shapes never takes a path those "
            "shapes do not need (a tail block, a second chunk); when your change adds such a path, exercise it "
            "with quick_check(shapes=[\"odd\", \"tail\"]) rather than by editing block sizes.")


def render_diagnosis(d: Diagnosis) -> str:
    """The analyst's diagnosis as a few lines of text (not its JSON)."""
    lines = [f"bottleneck: {d.bottleneck}" + (f"; headroom {d.headroom:.0%} above the floor" if d.headroom is not None
                                              else "")]
    lines += [f"- {e}" for e in d.evidence]
    lines.append(d.summary)
    return "\n".join(lines)


def render_proposal(p: Proposal) -> str:
    """The change to make, as the coder reads it."""
    return (f"{p.what}\n(category {p.category}, key {p.key}; why: {p.why}; predicted {p.predicted_speedup:.2f}× "
            f"the parent's speed, risk {p.risk})")


def standing(result: EvalResult | None) -> str:
    """Where a verified kernel stands, in one line: its time and noise band, against eager and torch.compile,
    and against the roofline floor (what the strategist needs of the verifier's numbers)."""
    if result is None:
        return "not judged"
    t = result.timing
    if t is None:
        return f"{result.verdict} ({result.reason}); not timed ({result.timing_unavailable or 'no timing'})"
    bits = [f"{t.median_ms:.4g} ms median (noise band ±{t.noise_band:.1%})"]
    if t.speedup_vs_eager:
        bits.append(f"{t.speedup_vs_eager:.2f}× eager")
    if t.speedup_vs_compile:
        bits.append(f"{t.speedup_vs_compile:.2f}× torch.compile" + (f" ({t.compile_mode})" if t.compile_mode else ""))
    if t.fraction_of_floor is not None and t.floor_ms:
        bits.append(f"{t.fraction_of_floor:.0%} of the roofline floor ({t.floor_ms:.4g} ms, {t.bound}-bound)")
    return f"{result.verdict}; " + ", ".join(bits)


def describe_eval(result: EvalResult | None) -> str:
    """A bounded, model-safe summary of a verdict."""
    if result is None:
        return "verdict: not judged"
    lines = [f"verdict: {result.verdict} ({result.reason})"]
    if result.max_rel_error is not None:
        lines.append(f"max relative error: {result.max_rel_error:.3g}")
    t = result.timing
    if t:
        for k in ("median_ms", "speedup_vs_eager", "speedup_vs_compile", "floor_ms", "bound", "fraction_of_floor",
                  "noise_band"):
            v = getattr(t, k)
            if v is not None:
                lines.append(f"{k}: {v}")
    else:
        lines.append(f"timing: unavailable ({result.timing_unavailable or 'not measured'})")
    return "\n".join(lines)


SWEPT_HEADING = "What the builtin's tuning measured around this kernel:"


def analyst_prompt(*, problem: str, parent: str, evaluation: str, profile: str, facts: str, parent_label: str,
                   history: str, swept: str = "") -> str:
    """The analyst's prompt: the problem, the parent, its verdict and profile, the device, the lineage's last
    steps and what a tuning sweep measured around the parent (a model analysing a parent whose block sizes and
    warps had been timed was not told, and guessed at occupancy the sweep had answered)."""
    return prompts.load("analyst").format(problem=problem, parent=parent, evaluation=evaluation, profile=profile,
                                          facts=facts, parent_label=parent_label,
                                          history=(history or "(none yet)") + (f"\n{SWEPT_HEADING}\n{swept}" if swept
                                                                               else ""))


def strategist_prompt(*, problem: str, parent: str, standing: str, diagnosis: Diagnosis, history: str,
                      failed: list[str], sibling_rank: int, facts: str, evidence: str, inspirations: str,
                      predictions: str, playbook: str | None, parent_label: str, steering: str, coder_can: str,
                      swept: str) -> str:
    """The strategist's prompt: the diagnosis (not what the analyst read, except `evidence` where the analyst was
    the builtin), the parent's standing, the lineage, what failed and what a tuning sweep measured, the branch's
    rank among its siblings, inspirations, predictions, the playbook, what the coder can apply, steering."""
    siblings = ("(none: this is the only branch on this parent)" if sibling_rank == 0 else
                f"{sibling_rank} other branch(es) work on this same parent right now and take your most promising "
                f"idea(s); to keep the branches distinct, propose your choice number {sibling_rank + 1} in order of "
                "promise.")
    prompt = prompts.load("strategist").format(
        problem=problem, parent=parent, standing=standing, diagnosis=render_diagnosis(diagnosis),
        evidence=f"\nWhat the analyst read (the profile of the parent):\n{evidence}\n" if evidence else "",
        history=history or "(none yet)", siblings=siblings, facts=facts,
        failed=(", ".join(failed) or "(none)") + (f"\n{SWEPT_HEADING}\n{swept}"
                                                   if swept else ""),
        inspirations=inspirations, predictions=predictions, parent_label=parent_label,
        playbook=playbook if playbook is not None else clip(prompts.playbook(), PLAYBOOK_CHARS))
    if coder_can:
        prompt += "\n\n## What the coder can apply in this run\n" + coder_can
    if steering:
        prompt += ("\n\n## The reviewer's standing instructions (a person steering this run: follow them)\n"
                   + steering)
    return prompt


def coder_prompt(*, problem: str, parent: str, proposal: Proposal, facts: str, inspirations: str,
                 quick_check_text: str, parent_label: str, coverage: str) -> str:
    """The coder's prompt: the proposal (whose `why` carries the diagnosis), the parent, the device, inspirations,
    what the quick check exercises, the candidate contract."""
    return prompts.load("coder").format(
        problem=problem, parent=parent, proposal=render_proposal(proposal), facts=facts,
        inspirations=inspirations, quick_check=quick_check_text, parent_label=parent_label,
        coverage=coverage or coverage_note(problem), contract=prompts.contract())


WRITER_LEARNED_HEAD = ("\n\n## What earlier runs learned on problems of this kind\nMoves that measured a gain on "
                       "earlier runs' kernels (their kernels are not yours: weigh each move for your first design, "
                       "and measure):\n")
"""heads the knowledge store's entries in the first-kernel writer's prompt (`playbook.for_writer`)"""


def writer_prompt(*, problem: str, facts: str, quick_check_text: str, rejected: str | None = None,
                  learned: str = "") -> str:
    """The first-kernel writer's prompt; `rejected`: the full verifier's verdict on the attempt it repairs;
    `learned`: the knowledge store's entries for the problem's kinds (`playbook.for_writer`), none when empty."""
    prompt = prompts.load("writer").format(problem=problem, facts=facts, quick_check=quick_check_text,
                                           contract=prompts.contract(),
                                           learned=WRITER_LEARNED_HEAD + learned if learned else "")
    if rejected is not None:
        prompt += ("\n\n## Your previous attempt, rejected by the full verifier\nIt passed the quick check, but the "
                   f"full verification (every input family, more trials) rejected it:\n{rejected}\nThe editor starts "
                   "with that attempt's source: repair it (view_kernel shows it).")
    return prompt
