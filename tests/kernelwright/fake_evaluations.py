"""A stand-in for the run's evaluators, for tests of the loop's control (budgets, stops, status words, provider
outages) that need many steps fast: every candidate "passes", untimed, as on the CPU, without Triton's
interpreter ever running it. The real verifier is tested elsewhere; here it would only cost minutes.

    def test_x(monkeypatch):
        fake_evaluations(monkeypatch)                  # every kernel passes
        fake_evaluations(monkeypatch, reject={SEED_SRC})  # these sources fail (wrong_output)
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kernelwright.evaluators import EvalResult


class FakeEvaluator:
    """Answers like an evaluator on the CPU: verified, untimed; `reject` holds sources judged wrong."""

    def __init__(self, reject: set[str], delay_s: float, calls: list[str]) -> None:
        self.reject, self.delay_s, self.calls = reject, delay_s, calls

    def evaluate(self, source: str, quick: bool = False) -> EvalResult:
        self.calls.append(source)
        if self.delay_s:
            time.sleep(self.delay_s)
        if source in self.reject:
            return EvalResult(verdict="fail", reason="wrong_output", detail="fake: judged wrong", device="cpu",
                              timing_unavailable="fake evaluator")
        return EvalResult(verdict="pass", reason="ok", detail="fake: verified", device="cpu",
                          timing_unavailable="fake evaluator", families=["base", "test_inputs"])

    def close(self) -> None:
        pass


def fake_evaluations(monkeypatch: pytest.MonkeyPatch, *, reject: set[str] | None = None,
                     delay_s: float = 0.0) -> list[str]:
    """Make every run's evaluators in this test fake ones; returns the list of sources judged, in order."""
    from kernelwright.tools.evaluation import Evaluations

    calls: list[str] = []

    def evaluator(self: Any, device: str) -> FakeEvaluator:
        return FakeEvaluator(reject or set(), delay_s, calls)

    monkeypatch.setattr(Evaluations, "evaluator", evaluator)
    return calls
