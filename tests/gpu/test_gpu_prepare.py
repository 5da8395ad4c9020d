"""On a GPU, `Evaluator.prepare` (issue 24, item 5: set up while the model writes the first kernel) builds the
torch.compile baseline and the roofline, and the first evaluation after it reuses them instead of compiling again.

`make test-gpu` (or `pytest -m gpu`) on a machine with CUDA; skipped everywhere else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from kernelwright.evaluators import EvalPolicy, Evaluator, Limits, load_problem
from kernelwright.evaluators import baselines

HERE = Path(__file__).parent / "fixtures"
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_prepare_builds_the_baselines_a_later_evaluation_reuses(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baselines, "cache_dir", lambda: tmp_path)  # no compiled median from an earlier run on disk
    compiled: list[Any] = []
    real = torch.compile

    def counting(*args: Any, **kwargs: Any) -> Any:
        compiled.append(kwargs.get("mode"))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "compile", counting)
    policy = EvalPolicy(trials=3, limits=Limits(call_s=60, first_call_s=120))
    with Evaluator(load_problem(HERE / "add_problem.py"), "cuda", policy) as ev:
        record = ev.prepare()
        assert record["outcome"] == "ready", record
        assert compiled == ["default"], compiled
        assert ev._roof is not None and record["phases"]["baseline_compile_s"] > 0, record
        result = ev.evaluate((HERE / "honest_add.py").read_text())
        assert result.passed, f"{result.reason}: {result.detail}"
        assert compiled == ["default"], "the first evaluation compiled the baseline again"
        assert result.timing is not None and result.timing.speedup_vs_compile is not None
        assert result.phases["worker_wait_s"] < 1.0, result.phases
