"""Which torch.compile modes one evaluation measures: max-autotune beside the default mode (so a model-driven run
states each kernel against both), a CUDA-graph mode beside its no-graph twin."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernelwright.evaluators.baselines import BaselineTimer


@pytest.mark.parametrize(("mode", "measured"), [
    ("default", ["default"]),
    ("max-autotune", ["max-autotune", "max-autotune-no-cudagraphs", "default"]),
    ("max-autotune-no-cudagraphs", ["max-autotune-no-cudagraphs", "default"]),
    ("reduce-overhead", ["reduce-overhead", "default"]),
    (None, []),
])
def test_modes_measured(mode: str | None, measured: list[str]) -> None:
    timer = BaselineTimer(SimpleNamespace(device="cpu"), mode)  # type: ignore[arg-type]
    assert timer.modes() == measured


def test_a_runs_compile_mode_reaches_its_evaluators(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`optimize --compile-mode max-autotune` is the run's setting, and the policy its evaluators are built with."""
    from typer.testing import CliRunner

    from kernelwright.agents.context import RunConfig
    from kernelwright.cli import app
    from kernelwright.cli import settings_config
    from kernelwright.tools.evaluation import Evaluations

    config = settings_config("optimize", dict(model="builtin", iterations=1, branches=1, device="cpu", trials=1,
                                              profile="auto", review="none", compile_mode="max-autotune"))
    assert config.compile_mode == "max-autotune" and RunConfig().compile_mode == "default"
    assert Evaluations(None, compile_mode="max-autotune").compile_mode == "max-autotune"  # type: ignore[arg-type]
    assert Evaluations(None, compile_mode="none").compile_mode is None  # type: ignore[arg-type]
    help_text = CliRunner().invoke(app, ["optimize", "--help"], env={"COLUMNS": "200"}).output
    assert "--compile-mode" in help_text


def test_inductors_search_does_not_reach_the_users_log(caplog) -> None:  # type: ignore[no-untyped-def]
    """max-autotune logs each configuration that does not fit the GPU as an error with a traceback: part of its
    search. While the baseline compiles, Inductor's loggers are silenced; afterwards they are as they were."""
    import logging

    from kernelwright.evaluators.baselines import quiet_inductor

    search = logging.getLogger("torch._inductor.select_algorithm")
    before = logging.getLogger("torch._inductor").level
    with caplog.at_level(logging.DEBUG):
        with quiet_inductor():
            search.error("Exception No valid triton configs. OutOfMemoryError: out of resource: triton_mm")
        assert "No valid triton configs" not in caplog.text
        search.error("after the compile, errors are logged again")
        assert "after the compile" in caplog.text
    assert logging.getLogger("torch._inductor").level == before


def test_a_cuda_graph_mode_is_not_timed_on_inputs_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA-graph mode's graphs keep static copies of the inputs and outputs for the evaluator's lifetime: a 7.5 GB
    GroupNorm's max-autotune baseline held 15 GB an H100's memory plan did not know of, and three evaluations ran out
    of device memory. Above a 32nd of the device's memory the graph mode is not timed (and never compiled), said so
    in `compile_modes`, and its no-graph twin stands for it; below it, every mode is timed as before."""
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: SimpleNamespace(total_memory=80 * 10**9))
    timer = BaselineTimer(SimpleNamespace(device=torch.device("cuda:0")), "max-autotune")  # type: ignore[arg-type]
    compiled: list[str] = []

    def one(mode: str, pool: list, reps: int, warmup: int) -> tuple[dict, None]:
        compiled.append(mode)
        return {"median_ms": {"max-autotune": 1.0, "max-autotune-no-cudagraphs": 7.4, "default": 7.5}[mode]}, None

    monkeypatch.setattr(timer, "_compiled_one", one)
    big = [[torch.empty(2 * 10**9 + 1, dtype=torch.float32, device="meta")]]  # 8 GB of input
    best, why = timer.compiled(big, 3)
    assert compiled == ["max-autotune-no-cudagraphs", "default"] and why is None
    assert best is not None and best["mode"] == "max-autotune-no-cudagraphs" and best["median_ms"] == 7.4
    assert best["modes"]["max-autotune"].startswith("not timed: its CUDA graphs would keep 8 GB of inputs")
    small = [[torch.empty(10**8, dtype=torch.float32, device="meta")]]  # 0.4 GB: the graphs pay for themselves
    compiled.clear()
    best, _ = timer.compiled(small, 3)
    assert compiled == ["max-autotune", "max-autotune-no-cudagraphs", "default"] and best["mode"] == "max-autotune"


def test_a_mode_not_timed_is_said_so_in_the_profile() -> None:
    from kernelwright.evaluators import Timing
    from kernelwright.evaluators.profiling import Profile, render

    t = Timing(median_ms=5.5, p25_ms=5.4, p75_ms=5.6, min_ms=5.3, max_ms=5.7, reps=30, wall_median_ms=5.6,
               noise_band=0.01, eager_ms=9.9, speedup_vs_eager=1.8, vs_eager="faster", compile_mode="default",
               compile_ms=7.4, compile_modes={"max-autotune": "not timed: its CUDA graphs would keep 7.5 GB ...",
                                              "max-autotune-no-cudagraphs": 7.45, "default": 7.4},
               best_baseline_ms=7.4, best_baseline="torch.compile")
    text = render(Profile(verdict="pass", timing=t))
    assert "max-autotune not timed (CUDA graphs at this size)" in text and "max-autotune failed" not in text
