"""PyTorch's failures are not the kernel's (docs/verifier.md section D): a draw on which PyTorch's own result in the
problem's precision has NaN or Inf where the float64 gold is finite (`exp(x) / sum(exp(x))` overflowing in fp32)
is a draw on which PyTorch is as far off as can be. It is skipped alone and said in the notes, never read as
zero error (which failed the faithful kernel `nan_output`, "PyTorch's own fp32 error on these inputs: 0") and
never folded into a tolerance (an infinite one would pass anything finite). A kernel with NaN where PyTorch is
finite still fails.

The problem is tests/kernels/honest/naive_softmax_problem.py; its draws are fixed by the session's seed, and
each test first checks the premise it relies on (which draws overflow in fp32 alone)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from kernelwright.evaluators import EvalPolicy, EvalResult, Evaluator, Limits, Reason, WorkerPool, load_problem
from kernelwright.evaluators.compare import compare
from kernelwright.evaluators.reference import (
    CALIBRATION_TRIALS, ReferenceSession, _native_error, _to_double,
)

ROOT = Path(__file__).resolve().parents[2]
HONEST = ROOT / "tests" / "kernels" / "honest"
PROBLEM = HONEST / "naive_softmax_problem.py"
FAITHFUL = (HONEST / "naive_softmax_candidate.py").read_text()
# The faithful kernel, but NaN wherever x > 20: values PyTorch's fp32 exp takes without overflowing (it does so
# past 88.7), reached by the scaled-up and heavy-tailed draws only
NAN_ABOVE_20 = FAITHFUL.replace(
    "y = tl.exp(x.to(tl.float32)) / total",
    "y = tl.exp(x.to(tl.float32)) / total\n        y = tl.where(x > 20.0, float(\"nan\"), y)")
# Seed 0, battery 1 (see `_kinds`): scaled "...NN", heavy_tailed "NNmmm"; seed 8: heavy_tailed "NNNNN"
SEED = 0
ALL_SKIPPED_SEED = 8


def _session(seed: int = SEED, path: Path = PROBLEM) -> ReferenceSession:
    return ReferenceSession(load_problem(path), torch.device("cpu"), seed=seed)


def _kind(ref: ReferenceSession, family: str, index: int, battery: int) -> str:
    """What a draw is: "G" the float64 gold itself is not finite, "N" PyTorch's fp32 result is not finite where
    the gold is, "m" both finite with values past 20 (the NaN-above-20 kernel's target), "." both finite."""
    x = ref.draw(family, index, battery)
    with torch.no_grad():
        native = ref.native(*x)
        gold = ref._gold()(*_to_double(x))
    if not bool(torch.isfinite(gold).all()):
        return "G"
    if not bool(torch.isfinite(native).all()):
        return "N"
    return "m" if float(x[0].max()) > 20 else "."


def _kinds(ref: ReferenceSession, family: str, battery: int, n: int = 5) -> str:
    return "".join(_kind(ref, family, i, battery) for i in range(n))


# -- the rule, in compare and reference terms ------------------------------------------------------------


def test_a_non_finite_comparison_says_so() -> None:
    ref = torch.rand(8, 33, dtype=torch.float64) + 0.1
    bad = ref.float().clone()
    bad[3, 4] = float("nan")
    c = compare(bad, ref, 1.0)
    assert c.reason == Reason.NAN_OUTPUT and c.non_finite and c.max_rel == math.inf
    far = ref.float() * 3  # finite but far off: an error of its size, not a non-finite one
    c = compare(far, ref, 1.0)
    assert not c.ok and c.reason == Reason.WRONG_OUTPUT and not c.non_finite and math.isfinite(c.max_rel)
    inf_ref = ref.clone()
    inf_ref[0, 0] = math.inf
    got = inf_ref.float().clone()
    got[0, 0] = float("nan")  # not the reference's own Inf
    assert compare(got, inf_ref, 1.0).non_finite
    assert not compare(ref.float(), ref, 1e-4).non_finite


def test_pytorch_non_finite_where_the_gold_is_finite_is_infinite_error_never_zero() -> None:
    gold = torch.rand(4, 65, dtype=torch.float64) + 0.1
    native = gold.float()
    close = _native_error([native], [gold])
    assert 0 < close < 1e-6
    native[2, 7] = float("nan")
    assert _native_error([native], [gold]) == math.inf  # was 0: the NaN dropped as if it were exact
    native[2, 7] = math.inf
    assert _native_error([gold.float(), native], [gold, gold]) == math.inf  # any output


def test_a_calibrating_draw_where_pytorch_overflows_is_skipped_alone() -> None:
    """Measured up front (a family's first draws are calibrated): the draw goes, its family stays judged, the
    notes name the draw and why, and it is not counted as one of the family's calibration draws."""
    ref = _session()
    b = ref.new_battery()
    assert _kinds(ref, "scaled", b) == "...NN"
    assert ref.trial("scaled", 3, b) is None
    assert "scaled" not in ref.skipped and ref.non_finite_draws == {"scaled": [3]}
    assert ref._calibrated.get("scaled", 0) == 0 and ref.family_error.get("scaled", 0.0) == 0.0
    note = next(n for n in ref.notes if n.startswith("scaled: "))
    assert "1 draw(s) skipped (scaled draw 3)" in note and "NaN or Inf where the float64 result is finite" in note
    calm = [ref.trial("scaled", i, b) for i in range(3)]
    assert all(t is not None and t.calibrating and t.native_measured for t in calm)
    assert 0 < ref.family_error["scaled"] < 1e-5 and ref.family_tolerance("scaled") == ref.base_tolerance


def test_the_second_look_skips_a_draw_where_pytorch_overflows() -> None:
    """Not measured up front (the family's calibration was calm): the candidate's NaN there sends the draw to the
    second look, which finds PyTorch's own result non-finite and drops the draw instead of "error 0"."""
    ref = _session()
    b = ref.new_battery()
    assert _kinds(ref, "scaled", b) == "...NN"
    for i in range(CALIBRATION_TRIALS):
        assert ref.trial("scaled", i, b) is not None
    t = ref.trial("scaled", 4, b)
    assert t is not None and not t.native_measured and not t.calibrating
    assert ref.second_look(t) == ("skip", None)
    assert t.native_error == math.inf and ref.non_finite_draws == {"scaled": [4]}
    assert ref.family_tolerance("scaled") == ref.base_tolerance and "scaled" not in ref.skipped


def test_a_sensitive_family_skips_the_draw_and_keeps_a_finite_tolerance() -> None:
    ref = _session()
    b = ref.new_battery()
    assert _kinds(ref, "heavy_tailed", b) == "NNmmm"
    for i in (2, 3, 4):
        assert ref.trial("heavy_tailed", i, b) is not None
    ref.family_error["heavy_tailed"] = ref.base_tolerance  # as if PyTorch had deviated on its first draws
    assert ref.sensitive("heavy_tailed")
    assert ref.trial("heavy_tailed", 0, b) is None
    assert ref.non_finite_draws == {"heavy_tailed": [0]} and "heavy_tailed" not in ref.skipped
    assert math.isfinite(ref.family_tolerance("heavy_tailed"))
    # the shared rule itself: an infinite PyTorch error never becomes an infinite tolerance, whatever the family
    made = ref._make_trial("base", 7, ref.draw("base", 7, b))
    assert made is not None
    assert ref._judge_own_draw(made[0], math.inf, ref.base_tolerance) is None
    assert ref.non_finite_draws["base"] == [7]


class _NaNAt(nn.Module):
    """PyTorch's own result with one NaN (a problem whose own inputs overflow now and then)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.exp(x) / torch.exp(x).sum(dim=1, keepdim=True)
        y[0, 0] = float("nan")
        return y


def test_on_the_base_family_pytorch_finite_stands_and_pytorch_non_finite_skips() -> None:
    """The base family gets no widening from a second look, but a draw of it on which PyTorch's own result is
    not finite is skipped like any other; where PyTorch is finite a NaN candidate's failure stands."""
    ref = _session()
    b = ref.new_battery()
    for i in range(CALIBRATION_TRIALS):
        assert ref.trial("base", i, b) is not None
    t = ref.trial("base", 3, b)
    assert t is not None and not t.native_measured
    assert ref.second_look(t) == ("stands", None)
    assert t.native_measured and 0 <= t.native_error < 1e-5  # said in the failure's detail
    t = ref.trial("base", 4, b)
    real, ref.native = ref.native, _NaNAt()
    try:
        assert ref.second_look(t) == ("skip", None)
    finally:
        ref.native = real
    assert ref.non_finite_draws == {"base": [4]}


def test_a_family_whose_every_draw_was_skipped_is_reported_skipped() -> None:
    ref = _session(ALL_SKIPPED_SEED)
    b = ref.new_battery()
    assert _kinds(ref, "heavy_tailed", b) == "NNNNN"
    assert all(ref.trial("heavy_tailed", i, b) is None for i in range(5))
    assert all(ref.trial("base", i, b) is not None for i in range(5))
    skips = ref.family_skips({"base", "heavy_tailed"}, {"base"})
    assert set(skips) == {"heavy_tailed"}
    assert skips["heavy_tailed"].startswith("every draw skipped: 5 draw(s) skipped")
    assert ref.family_skips({"base", "heavy_tailed"}, {"base", "heavy_tailed"}) == {}


# -- whole evaluations, on the CPU (Triton's interpreter) --------------------------------------------------


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with WorkerPool("cpu", Limits(), spares=1) as p:
        yield p


def _evaluate(pool: WorkerPool, source: str, seed: int, path: Path = PROBLEM, **policy: object) -> EvalResult:
    with Evaluator(load_problem(path), "cpu", EvalPolicy(trials=5, compile_mode=None, **policy), pool=pool,
                   seed=seed) as ev:
        return ev.evaluate(source)


def test_the_faithful_naive_softmax_passes(pool: WorkerPool) -> None:
    """Seed 8: every heavy-tailed draw and one scaled draw overflow in fp32 alone. Before, the first of them to
    reach the kernel failed it `nan_output` with "PyTorch's own fp32 error on these inputs: 0"."""
    ref = _session(ALL_SKIPPED_SEED)
    b = ref.new_battery()
    assert _kinds(ref, "heavy_tailed", b) == "NNNNN" and _kinds(ref, "scaled", b) == ".N..."
    result = _evaluate(pool, FAITHFUL, ALL_SKIPPED_SEED)
    assert result.verdict == "pass", (result.reason, result.detail)
    assert result.families == ["base", "scaled", "sign_flip"] and len(result.trials) == 14
    checks = {c.name: c for c in result.checks}
    assert checks["family:heavy_tailed"].outcome == "skip"
    assert "every draw skipped" in checks["family:heavy_tailed"].detail
    notes = [c.detail for c in result.checks if c.name == "tolerance"]
    assert any(n.startswith("scaled: 1 draw(s) skipped (scaled draw 1): PyTorch's own fp32 result has NaN or Inf")
               for n in notes), notes


def test_a_kernel_with_nan_where_pytorch_is_finite_still_fails(pool: WorkerPool) -> None:
    assert "x > 20.0" in NAN_ABOVE_20
    ref = _session()
    b = ref.new_battery()
    assert "m" in _kinds(ref, "heavy_tailed", b)  # a draw past 20 on which PyTorch stays finite
    result = _evaluate(pool, NAN_ABOVE_20, SEED)
    assert result.verdict == "fail" and result.reason == Reason.NAN_OUTPUT, (result.reason, result.detail)
    assert "NaN or Inf where the reference is finite" in result.detail
    assert "PyTorch's own fp32 error on these inputs: " in result.detail  # measured: finite, and small
    assert not result.detail.endswith("inputs: inf")


def test_a_problem_on_which_no_draw_can_be_judged_is_said_so(pool: WorkerPool, tmp_path: Path) -> None:
    """Every base draw overflows in fp32 alone (inputs near 100): no draw at all is judged, so there is no
    verdict on the kernel, only the problem's: "no input family could be checked", with why."""
    path = tmp_path / "shifted_softmax.py"
    path.write_text(PROBLEM.read_text().replace("torch.randn(16, 389) * 1.5", "torch.randn(16, 389) * 1.5 + 100.0"))
    result = _evaluate(pool, FAITHFUL, SEED, path, families=("base",))
    assert result.verdict == "error" and result.reason == Reason.BAD_PROBLEM, (result.reason, result.detail)
    assert "no input family could be checked (base: every draw skipped: 5 draw(s) skipped" in result.detail


def test_a_failure_not_about_values_gets_no_second_look(pool: WorkerPool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second look may drop a draw on which PyTorch overflows; never one failed for what PyTorch's values
    cannot explain: here elements left unwritten (the poison put into fresh allocations), which must stand even if
    every draw were one PyTorch overflows on."""
    unwritten = FAITHFUL.replace("mask = c < n_cols\n", "mask = c < n_cols - 1\n")
    assert unwritten != FAITHFUL
    looked: list[str] = []

    def second_look(self: ReferenceSession, trial):  # as if PyTorch overflowed on every draw
        looked.append(trial.family)
        return "skip", None

    monkeypatch.setattr(ReferenceSession, "second_look", second_look)
    result = _evaluate(pool, unwritten, SEED)
    assert result.verdict == "fail" and result.reason == Reason.STALE_OUTPUT, (result.reason, result.detail)
    assert not looked
