"""The archive's decisions: admission against the noise band, elites, niches, parent selection, stopping."""

from __future__ import annotations

import random

import pytest

from kernelwright.agents.archive import (
    Archive, Outcome, admit, cell_of, seed, select_parents,
)
from kernelwright.agents.stopping import stop_reason


def outcome(cid: str, speedup: float | None = 1.0, *, verdict: str = "pass", warps: int = 4, stages: int = 2,
            band: float = 0.02, suspect: list[str] | None = None, frac: float | None = None) -> Outcome:
    return Outcome(child_id=cid, verdict=verdict, reason="ok" if verdict == "pass" else "wrong_output",
                   speedup_vs_eager=speedup, noise_band=band, suspect=suspect or [], fraction_of_floor=frac,
                   kernels=[{"name": "k", "launches": 20, "compiled": {"num_warps": warps, "num_stages": stages,
                                                                        "shared_bytes": 1024}}],
                   bound="memory")


@pytest.fixture
def base() -> Archive:
    return seed(Archive(), outcome("seed", 1.0))


def test_seed_must_be_verified() -> None:
    with pytest.raises(ValueError, match="not verified"):
        seed(Archive(), outcome("s", verdict="fail"))


def test_a_real_gain_becomes_the_best(base: Archive) -> None:
    arch, step = admit(base, "seed", "num_warps=8", outcome("c1", 1.30))
    assert step.decision == "elite" and arch.best.id == "c1"
    assert step.delta == pytest.approx(0.30)
    assert arch.entries["c1"].parent_id == "seed" and arch.entries["c1"].generation == 1
    assert base.best.id == "seed", "admit must not mutate its input"


def test_a_gain_inside_the_noise_band_is_no_gain(base: Archive) -> None:
    arch, step = admit(base, "seed", "BLOCK_N=4096", outcome("c1", 1.015, band=0.02))
    assert step.decision == "rejected" and "noise band" in step.why
    assert "c1" not in arch.entries
    assert "BLOCK_N=4096" in arch.failed["seed"]


def test_a_noise_level_child_in_an_empty_niche_is_kept_as_a_niche(base: Archive) -> None:
    arch, step = admit(base, "seed", "num_stages=4", outcome("c1", 1.0, stages=4))
    assert step.decision == "niche"
    assert "c1" in arch.niches.values() and arch.elites == ["seed"]


@pytest.mark.parametrize("bad", [
    outcome("c1", 3.0, verdict="fail"),
    outcome("c1", 30.0, suspect=["more than 10x faster than eager"]),
    None,
])
def test_wrong_suspect_or_missing_children_are_rejected_and_remembered(base: Archive, bad: Outcome | None) -> None:
    arch, step = admit(base, "seed", "p", bad)
    assert step.decision == "rejected"
    assert arch.entries.keys() == {"seed"}
    assert "p" in arch.failed["seed"] and "q" not in arch.failed["seed"]
    assert len(arch.steps) == 1 and arch.steps[0].parent_id == "seed"


def test_slower_children_are_rejected(base: Archive) -> None:
    _, step = admit(base, "seed", "p", outcome("c1", 0.7, warps=8))
    assert step.decision == "rejected" and "slower" in step.why


def test_elites_are_ranked_and_bounded(base: Archive) -> None:
    arch = base.model_copy(update={"elite_size": 3})
    for i, s in enumerate([1.2, 1.5, 1.3, 1.8]):
        arch, _ = admit(arch, "seed", f"p{i}", outcome(f"c{i}", s, warps=8))
    assert arch.elites == ["c3", "c1", "c2"]


def test_a_better_kernel_takes_over_its_niche(base: Archive) -> None:
    arch, _ = admit(base, "seed", "a", outcome("c1", 1.2, warps=8))
    arch, _ = admit(arch, "c1", "b", outcome("c2", 1.5, warps=8))
    cell = "/".join(map(str, cell_of(outcome("x", warps=8).kernels, "memory")))
    assert arch.niches[cell] == "c2"


def test_duplicate_children_are_not_admitted_twice(base: Archive) -> None:
    arch, _ = admit(base, "seed", "a", outcome("c1", 1.2, warps=8))
    arch, step = admit(arch, "seed", "b", outcome("c1", 1.2, warps=8))
    assert step.decision == "rejected" and step.reason == "duplicate"


def test_parent_selection_exploits_and_explores(base: Archive) -> None:
    arch = base
    for i, (s, w) in enumerate([(1.5, 8), (1.2, 16), (1.0, 2)]):
        arch, _ = admit(arch, "seed", f"p{i}", outcome(f"c{i}", s, warps=w, band=0.01))
    # explore=0: pure exploitation, best first, no repeats while others exist
    assert select_parents(arch, 2, random.Random(0), explore=0.0) == arch.elites[:2]
    # explore=1: only niche occupants that are not elites
    explorers = {i for i in arch.niches.values() if i not in arch.elites}
    assert explorers, "the test needs a non-elite niche occupant"
    picks = select_parents(arch, 1, random.Random(1), explore=1.0)
    assert set(picks) <= explorers
    # more slots than kernels: everyone gets picked, then repeats
    many = select_parents(arch, 10, random.Random(2), explore=0.3)
    assert len(many) == 10 and set(many) == set(arch.entries)


def test_selection_needs_a_seeded_archive() -> None:
    with pytest.raises(ValueError):
        select_parents(Archive(), 1, random.Random(0))


def test_stopping_on_plateau_and_roofline(base: Archive) -> None:
    arch = base
    for i in range(5):
        arch, _ = admit(arch, "seed", f"p{i}", outcome(f"c{i}", 1.0, warps=4))
    assert stop_reason(arch, plateau_steps=5) == "no improvement in the last 5 steps"
    assert stop_reason(arch, plateau_steps=6) is None
    arch, _ = admit(arch, "seed", "fast", outcome("fast", 2.0, warps=8, frac=0.95))
    assert "roofline" in stop_reason(arch, plateau_steps=5, roofline_target=0.9)
    assert stop_reason(arch, plateau_steps=50, roofline_target=None) is None
    # near the floor but still slower than torch.compile: go on (level2/56 on an H100: 93 % of the floor, 0.95x)
    behind = seed(Archive(), outcome("s", 1.0, frac=0.93).model_copy(update={"speedup_vs_compile": 0.95}))
    assert stop_reason(behind, plateau_steps=50, roofline_target=0.9) is None
    level = seed(Archive(), outcome("s", 1.0, frac=0.93).model_copy(update={"speedup_vs_compile": 1.0}))
    assert "93% of the roofline floor" in stop_reason(level, plateau_steps=50, roofline_target=0.9)


def test_cells_separate_structurally_different_kernels() -> None:
    a = cell_of(outcome("a", warps=4).kernels, "memory")
    b = cell_of(outcome("b", warps=8).kernels, "memory")
    c = cell_of(outcome("c", warps=4).kernels, "compute")
    assert len({a, b, c}) == 3
    assert cell_of([], None) == (-1, -1, -1, "?")


def test_an_evaluator_failure_is_not_held_against_the_move() -> None:
    """verdict "error" means the judge failed (out of memory, a bug), not the child: the step is recorded, the
    child is not admitted, and the move stays available on that parent."""
    from kernelwright.agents.archive import Archive, Outcome, admit, seed

    archive = seed(Archive(), Outcome(child_id="seed", verdict="pass", reason="ok", median_ms=1.0,
                                              speedup_vs_eager=1.0))
    new, step = admit(archive, "seed", "block_size:up", Outcome(child_id="c1", verdict="error",
                                                                       reason="evaluator_error"))
    assert step.verdict == "error" and step.decision == "rejected" and "evaluator could not judge" in step.why
    assert "c1" not in new.entries
    assert "block_size:up" not in new.failed.get("seed", [])


# -- verified but untimed children, predictions, what the roles are shown (issue 10) ------------------------


def timed(cid: str, ms: float, **kw) -> Outcome:
    o = outcome(cid, 1.0 / ms, **kw)
    o.median_ms = ms
    return o


def untimed(cid: str) -> Outcome:
    o = outcome(cid, None)
    o.median_ms = None
    return o


def test_an_untimed_child_is_kept_unranked_and_built_on_next() -> None:
    from kernelwright.agents.archive import frontier

    a = seed(Archive(), untimed("seed"))
    a, step = admit(a, "seed", "BLOCK=512", untimed("c1"), step_id="g1b0", predicted=1.2)
    assert step.decision == "unmeasured" and step.verdict == "pass" and step.reason == "untimed"
    assert step.predicted_speedup == 1.2 and step.measured_speedup is None
    assert a.unmeasured == ["c1"] and "c1" in a.entries and not a.entries["c1"].measured
    assert "BLOCK=512" not in a.failed.get("seed", []), "a verified idea is not a failed one"
    assert a.best.id == "seed" and "c1" not in a.elites
    assert frontier(a) == ["c1"]
    assert select_parents(a, 1, random.Random(0), explore=0.0) == ["c1"]
    a, _ = admit(a, "c1", "NUM_WARPS=8", untimed("c2"), step_id="g2b0")
    assert frontier(a) == ["c2"], "a child built on leaves the frontier"


def test_a_timed_child_of_an_untimed_parent_is_measured_against_its_timed_ancestor() -> None:
    a = seed(Archive(), timed("seed", 2.0))
    a, _ = admit(a, "seed", "A", untimed("u"))
    a, step = admit(a, "u", "B", timed("t", 1.0), predicted=1.5)
    assert step.decision == "elite" and step.measured_speedup == pytest.approx(2.0)
    assert step.delta == pytest.approx(1.0)


def test_prediction_record_says_how_predictions_held() -> None:
    from kernelwright.agents.archive import prediction_record

    a = seed(Archive(), timed("seed", 2.0))
    assert prediction_record(a, "seed") == "(no predictions on this lineage yet)"
    a, _ = admit(a, "seed", "A", timed("c1", 1.0), step_id="g1b0", predicted=1.6)   # measured 2.0
    a, _ = admit(a, "c1", "B", timed("c2", 0.5), step_id="g2b0", predicted=2.5)     # measured 2.0
    text = prediction_record(a, "c2")
    assert "g1b0 A: predicted 1.60x, measured 2.00x" in text and "g2b0 B: predicted 2.50x, measured 2.00x" in text
    assert "over 2 timed step(s), measured / predicted is 1.00" in text and "well calibrated" in text
    u = seed(Archive(), untimed("s"))
    u, _ = admit(u, "s", "A", untimed("x"), predicted=1.3)
    assert "await a GPU measurement" in prediction_record(u, "x")
    optimistic = seed(Archive(), timed("s", 2.0))
    optimistic, _ = admit(optimistic, "s", "A", timed("k", 1.9), predicted=1.5)
    assert "(optimistic)" in prediction_record(optimistic, "k")


def test_inspirations_show_other_elites_and_niches_never_the_lineage() -> None:
    from kernelwright.agents.archive import describe, inspirations

    a = seed(Archive(), timed("seed", 4.0))
    a, _ = admit(a, "seed", "A", timed("e1", 2.0), step_id="g1b0")                    # elite, on c's lineage
    a, _ = admit(a, "seed", "B", timed("e2", 3.0, warps=8), step_id="g1b1")           # elite, a sibling
    a, _ = admit(a, "e1", "C", timed("c", 1.5), step_id="g2b0")                       # the parent below
    shown = inspirations(a, "c")
    ids = [e.id for _, e in shown]
    assert "c" not in ids and "e1" not in ids and "seed" not in ids, "the parent's own lineage is in its prompt"
    assert ids[0] == "e2" and shown[0][0].startswith("elite #")
    assert describe(a, "c") == "c: the child of step g2b0 (C); 1.5 ms, 0.67x eager"
    assert describe(a, "seed") == "seed: the seed; 4 ms, 0.25x eager"
    # a first kernel the model wrote is not called a seed (a model read "the seed" as a kernel it was given)
    written = seed(Archive(), timed("first", 4.0), origin="the first kernel (the model wrote it from the reference)")
    assert describe(written, "first") == "first: the first kernel (the model wrote it from the reference); 4 ms, 0.25x eager"
    assert Archive.model_validate(written.model_dump()).seed_origin == written.seed_origin


def test_a_best_kernel_that_fails_a_fresh_judgement_is_revoked_and_the_next_is_judged(base: Archive) -> None:
    from kernelwright.agents.archive import recheck_best

    arch, _ = admit(base, "seed", "a", outcome("c1", 1.30))
    arch, _ = admit(arch, "c1", "b", outcome("c2", 1.60, warps=8))
    judged: list[str] = []

    def judge(h: str) -> tuple[str, str]:  # c2 is fragile: it fails its second fresh battery
        judged.append(h)
        return ("fail", "wrong_output: heavy_tailed") if h == "c2" and judged.count("c2") == 2 else ("pass", "ok")

    after, notes = recheck_best(arch, judge, times=2)
    assert judged == ["c2", "c2", "c1", "c1"]
    assert after.best.id == "c1" and "c2" not in after.elites and "c2" not in after.niches.values()
    assert "c2" in after.entries and "heavy_tailed" in after.revoked["c2"]
    assert notes[0].startswith("c2 failed judgement 2 of 2") and notes[1] == "c1 judged again 2x with fresh draws: passed"
    assert arch.best.id == "c2", "recheck_best must not mutate its input"
    # a revoked kernel is never selected as a parent again
    assert "c2" not in select_parents(after, 8, random.Random(0))
    # an evaluator that errs leaves the best as it was; every kernel failing leaves no best at all
    kept, notes = recheck_best(arch, lambda h: ("error", "evaluator_error: worker died"))
    assert kept.best.id == "c2" and "could not be made" in notes[0]
    none, notes = recheck_best(arch, lambda h: ("fail", "wrong_output"), limit=5)
    assert none.best is None and len(notes) == 3 and set(none.revoked) == {"c2", "c1", "seed"}


def test_the_history_says_what_a_judged_child_launched(tmp_path) -> None:
    """A rejected structural child was only a speed-up number in the next prompts; the model guessed why two of
    them did nothing. Its line now names its kernels' grids, registers, spills and warps (from its verdict)."""
    from types import SimpleNamespace

    from kernelwright.agents.briefing import render_history
    from kernelwright.agents.roles.selection import _with_launch
    from kernelwright.tools.runstore import RunStore

    run = RunStore(tmp_path).create("p.py", "source", {})
    h = run.put_kernel("child source")
    run.put_eval(h, {"verdict": "pass", "reason": "ok", "kernels": [
        {"name": "_persistent", "launches": 30, "grids": [[264]],
         "compiled": {"registers": 80, "spills": 0, "num_warps": 8}},
        {"name": "_merge", "launches": 30, "grids": [[896, 1]], "compiled": {"registers": 40}},
        {"name": "_third", "launches": 30, "grids": [[1]]}]})
    item = {"proposal": "persistent-rounds", "decision": "rejected", "verdict": "pass", "child": h[:12],
            "measured_speedup": 0.991, "predicted_speedup": 1.35}
    line = render_history([_with_launch(SimpleNamespace(run=run), item)])
    assert "child launched _persistent grid 264 80 registers 0 spills 8 warps, _merge grid 896x1 40 registers, " \
           "and 1 more kernel(s)" in line and "measured 0.991×" in line
    # a child that failed, or none, keeps its line as it was
    assert _with_launch(SimpleNamespace(run=run), {**item, "verdict": "fail"}) == {**item, "verdict": "fail"}
    assert _with_launch(SimpleNamespace(run=run), {**item, "child": None})["child"] is None


def test_every_stop_rule_is_decided_in_one_place() -> None:
    """`stopping.decide` (issue 25: the stop rules were split between roles.py and archive.py): the provider, the
    budgets in order, the search's own rules, an exhausted catalog, a stop asked for."""
    from kernelwright.agents.context import RunConfig
    from kernelwright.agents.stopping import FAILED, FINISHED, STOPPED, STOPPED_ON_REQUEST, decide

    arch = seed(Archive(), timed("seed", 4.0))
    for i in range(3):
        arch, _ = admit(arch, "seed", f"k{i}", timed(f"c{i}", 5.0), step_id=f"g{i + 1}b0")
    none = {"tokens": 0, "cost_usd": 0.0}
    moved = [{"proposal": {"key": "k"}, "child": "c", "llm": {}}]
    go = dict(results=moved, spent=none, active_s=1.0, stop_requested=False)
    assert decide(arch, RunConfig(iterations=3), **go) == ("iteration budget reached (3 steps)", FINISHED)
    assert decide(arch, RunConfig(iterations=9), **go) == (None, FINISHED)
    assert decide(arch, RunConfig(time_budget_s=1.0), **go)[0] == "time budget reached (1 s)"
    assert decide(arch, RunConfig(token_budget=10), **{**go, "spent": {"tokens": 12, "cost_usd": 0.0}})[0] == \
        "token budget reached (12 of 10 tokens)"
    down = [{"child": None, "llm": {"coder": {"error": "the provider is down", "error_kind": "provider"}}}]
    assert decide(arch, RunConfig(), **{**go, "results": down}) == ("the provider is down", FAILED)
    assert decide(arch, RunConfig(), **{**go, "results": down, "stop_requested": True}) == (STOPPED_ON_REQUEST, STOPPED)
    exhausted = [{"proposal": None, "child": None, "llm": {}, "coder": {"note": "no parent has a knob left"}}]
    assert decide(arch, RunConfig(iterations=9), **{**go, "results": exhausted})[0] == \
        "search exhausted: no parent has a knob left"
    assert decide(arch, RunConfig(iterations=9), **{**go, "stop_requested": True}) == (STOPPED_ON_REQUEST, STOPPED)


def test_the_history_separates_what_the_coder_wrote_from_what_the_tuner_made_of_it() -> None:
    """A structural child the builtin's sweep then tuned was shown with the tuned speed-up alone, and a model credited
    the structure with a block size's gain (as written 1.003×, tuned 1.098×). Both are said now, with the knob."""
    from kernelwright.agents.briefing import render_history
    from kernelwright.agents.roles.selection import _with_tuning, tuned_children

    trace = [{"step_id": "g2b0", "tuning": {"from": "d72048c36abedfdb", "from_ms": 6.644, "chose": "BLOCK=8192",
                                            "child": "29c59ec476cdd24c", "chosen_ms": 6.0706}},
             {"step_id": "g3b0", "tuning": {"from": "b9eaa8b89c437361", "from_ms": 7.33, "chose": None,
                                            "child": None}}]
    tunings = tuned_children(trace)
    assert list(tunings) == ["g2b0"]
    item = {"step_id": "g2b0", "proposal": "resident-prefix-32768", "decision": "elite", "verdict": "pass",
            "child": "29c59ec476cd", "measured_speedup": 1.098, "predicted_speedup": 1.25}
    line = render_history([_with_tuning(item, tunings)])
    assert "as written 1.003×, 1.098× after the builtin tuned it (BLOCK=8192)" in line, line
    assert "measured 1.098×" not in line
    untuned = {**item, "step_id": "g3b0", "child": "b9eaa8b89c43"}
    assert _with_tuning(untuned, tunings) == untuned and "measured 1.098×" in render_history([untuned])
    # a later step whose coder wrote the tuned variant's very source was not itself tuned
    same_source = {**item, "step_id": "g4b0"}
    assert _with_tuning(same_source, tunings) == same_source


def test_an_evaluator_failure_is_said_and_leaves_the_move_untried(base: Archive) -> None:
    """A GroupNorm relay run on an H100 lost three moves to an evaluator out of device memory: each history line
    said only "error (evaluator_error)", the model guessed at its kernels, and each move was then barred as tried
    on the parent. The line now carries the evaluator's own words, and the move may come again."""
    from kernelwright.agents.archive import lineage_history, tried_on
    from kernelwright.agents.briefing import render_history

    broken = Outcome(child_id="c1", verdict="error", reason="evaluator_error",
                     detail="the evaluator itself ran out of device memory after the load phase at reference.py:182")
    arch, step = admit(base, "seed", "l2-reuse-window", broken)
    arch, _ = admit(arch, "seed", "BLOCK=8192", outcome("c2", verdict="fail"))
    assert step.decision == "rejected" and "l2-reuse-window" not in arch.failed.get("seed", [])
    assert tried_on(arch, "seed") == ["BLOCK=8192"]
    line = render_history(lineage_history(arch, "seed"))
    assert "the evaluator could not judge it (evaluator_error: the evaluator itself ran out of device memory" in line
    assert "the kernel is not to blame and the move is not counted as tried" in line
    # twice unjudged on one parent, the move is barred all the same (a kernel that hoards device memory would make
    # the trusted side run out of it at every step)
    arch, _ = admit(arch, "seed", "l2-reuse-window", broken.model_copy(update={"child_id": "c3"}))
    assert tried_on(arch, "seed") == ["BLOCK=8192", "l2-reuse-window"]
