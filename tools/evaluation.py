"""Evaluation as the roles use it: one `Evaluations` per run, holding that run's evaluators (one per
device) and caching verdicts in the run directory by kernel hash, so a kernel is judged once per run (a
resumed run re-reads the verdict instead of measuring again).

Run-scoped on purpose: two runs in one process never share an evaluator, a policy or a worker pool.
"""

from __future__ import annotations

import threading

from kernelwright.evaluators import EvalPolicy, EvalResult, Evaluator, problem_from_source
from kernelwright.evaluators.profiling import Profile

from .runstore import Run


class Evaluations:
    """The evaluators of one run (lazily built per device) and its verdict cache."""

    def __init__(self, run: Run, precision: str | None = None, trials: int = 5, spares: int = 1) -> None:
        self.run = run
        self.precision = precision
        self.trials, self.spares = trials, spares
        self._evaluators: dict[str, Evaluator] = {}
        self._lock = threading.Lock()
        self._closed = False

    def evaluator(self, device: str) -> Evaluator:
        with self._lock:
            if self._closed:
                raise RuntimeError("this run's evaluators are closed")
            ev = self._evaluators.get(device)
            if ev is None:
                problem = problem_from_source(self.run.problem_source(), self.run.info().problem, self.precision)
                ev = self._evaluators[device] = Evaluator(problem, device,
                                                            EvalPolicy(trials=self.trials, spares=self.spares))
            return ev

    def cached(self, h: str) -> EvalResult | None:
        """The run's verdict on kernel `h`, if it was judged."""
        data = self.run.eval(h)
        return EvalResult.model_validate(data) if data is not None else None

    def evaluate(self, source: str, device: str) -> tuple[str, EvalResult]:
        """(kernel hash, verdict): from the run's cache when this exact source was judged before."""
        h = self.run.put_kernel(source)
        cached = self.cached(h)
        if cached is not None:
            return h, cached
        result = self.evaluator(device).evaluate(source)
        if result.verdict != "error":  # a failure of the judge is not a fact about the kernel: judge it again later
            self.run.put_eval(h, result.model_dump(mode="json"))
        return h, result

    def profile(self, h: str, device: str, ncu: bool = False) -> Profile:
        """The analyst's view of a kernel of this run: its verdict and timing, the kernels it launched, the
        device-time breakdown of a profiled run and, with `ncu`, Nsight Compute's counters."""
        return self.evaluator(device).profile(self.run.kernel(h), ncu=ncu, result=self.cached(h))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            evaluators = list(self._evaluators.values())
            self._evaluators.clear()
        for ev in evaluators:
            ev.close()
