"""Flags given beside --resume that a resumed run does not take (its settings are its own, kept from its start)
are named in one line, not ignored without a word; those it does take (where it runs, where it is) are not."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kernelwright.cli import app


def test_run_settings_beside_resume_are_named_as_ignored(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["optimize", "--resume", "nosuchrun", "--iterations", "200",
                                 "--provider-retry-window", "1h", "--run-dir", str(tmp_path)])
    assert r.exit_code == 2  # the run does not exist: one sentence, as before
    assert "ignored with --resume: --iterations, --provider-retry-window" in r.output, r.output
    r = CliRunner().invoke(app, ["optimize", "--resume", "nosuchrun", "--device", "cpu", "--run-dir", str(tmp_path)])
    assert "ignored with --resume" not in r.output, r.output
