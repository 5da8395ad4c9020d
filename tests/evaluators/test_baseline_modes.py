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
