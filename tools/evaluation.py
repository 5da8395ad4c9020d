"""Evaluation as the agents use it: one Evaluator per (problem, device, precision) for the process's
lifetime, and results cached in the run directory by kernel hash, so a kernel is judged once per run
(a resumed run re-reads the verdict instead of measuring again)."""

from __future__ import annotations

import threading
from typing import Any

from kernelwright.evaluators import EvalPolicy, EvalResult, Evaluator, problem_from_source
from kernelwright.runstore import Run

_evaluators: dict[tuple[str, str, str | None], Evaluator] = {}
_lock = threading.Lock()


def evaluator_for(run: Run, device: str, precision: str | None = None, trials: int = 5,
                  spares: int = 1) -> Evaluator:
    key = (str(run.path), device, precision)
    with _lock:
        ev = _evaluators.get(key)
        if ev is None:
            problem = problem_from_source(run.problem_source(), run.info().problem, precision)
            ev = Evaluator(problem, device, EvalPolicy(trials=trials, spares=spares))
            _evaluators[key] = ev
        return ev


def close_all() -> None:
    with _lock:
        for ev in _evaluators.values():
            ev.close()
        _evaluators.clear()


def evaluate(run: Run, source: str, device: str, precision: str | None = None, trials: int = 5,
             spares: int = 1) -> tuple[str, dict[str, Any]]:
    """(kernel hash, EvalResult as a dict): from the run's cache when this exact source was judged before."""
    h = run.put_kernel(source)
    cached = run.eval(h)
    if cached is not None:
        return h, cached
    result: EvalResult = evaluator_for(run, device, precision, trials, spares).evaluate(source)
    data = result.model_dump(mode="json")
    if result.verdict != "error":  # a failure of the judge is not a fact about the kernel: judge it again later
        run.put_eval(h, data)
    return h, data
