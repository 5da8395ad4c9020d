"""A run's checkpoint history stays bounded (issue 24: a night of ten thousand steps wrote 850 MB of checkpoints),
and a run resumes from a pruned history as from a whole one. On fake evaluators: many steps in seconds."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from kernelwright import api
from kernelwright.agents.context import RunConfig
from kernelwright.graphs import checkpoints

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"
sys.path.insert(0, str(ROOT / "tests" / "kernelwright"))
from fake_evaluations import fake_evaluations  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def _rows(path: Path) -> tuple[int, int, int]:
    """(root checkpoints, all checkpoints, pending writes) in a run's checkpoint database."""
    with sqlite3.connect(path) as c:
        return (c.execute("SELECT COUNT(*) FROM checkpoints WHERE checkpoint_ns = ''").fetchone()[0],
                c.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0],
                c.execute("SELECT COUNT(*) FROM writes").fetchone()[0])


def _run(tmp_path: Path, steps: int) -> tuple[api.RunHandle, list[str]]:
    cfg = RunConfig(device="cpu", trials=1, branches=2, iterations=steps, plateau_steps=10 ** 6)
    with api.start_run(PROBLEM, seed_kernel=SEED, config=cfg, runs_dir=tmp_path) as h:
        ids = [s.step_id for s in h.steps()]
    return h, ids


def test_old_checkpoints_are_pruned_and_the_run_resumes_from_what_is_left(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    fake_evaluations(monkeypatch)
    # the same 24-step run (12 generations of 2 branches), with the whole history and with 2 generations of it
    monkeypatch.setattr(checkpoints, "KEEP_GENERATIONS", 10 ** 6)
    whole, ids = _run(tmp_path / "whole", 24)
    assert len(ids) == 24 and whole.pruner.deleted == 0
    monkeypatch.setattr(checkpoints, "KEEP_GENERATIONS", 2)
    pruned, ids = _run(tmp_path / "pruned", 24)
    assert len(ids) == 24
    (root_w, all_w, writes_w), (root_p, all_p, writes_p) = (_rows(whole.run.checkpoint_path),
                                                            _rows(pruned.run.checkpoint_path))
    per_generation = root_w / 12
    # what is left is about the last two generations' worth, in the root and the branches' namespaces alike
    assert pruned.pruner.deleted > 0 and root_p <= 4 * per_generation, (root_p, root_w)
    assert all_p < all_w / 3 and writes_p < writes_w / 3, (all_p, all_w, writes_p, writes_w)
    # the latest state is whole: the run's archive and step count are what the unpruned run has
    assert pruned.info().steps == whole.info().steps == 24
    # a stopped run with a pruned history resumes from its last checkpoint, steps neither lost nor repeated
    cfg = RunConfig(device="cpu", trials=1, branches=1, iterations=12, plateau_steps=10 ** 6)
    with api.start_run(PROBLEM, seed_kernel=SEED, config=cfg, runs_dir=tmp_path / "stop") as h:
        first: list[str] = []
        for s in h.steps():
            first.append(s.step_id)
            if len(first) == 6:
                h.request_stop()
    assert h.pruner.deleted > 0 and h.info().status == "stopped", (h.pruner.deleted, h.info().status)
    with api.resume_run(h.id, runs_dir=tmp_path / "stop") as again:
        rest = [s.step_id for s in again.steps()]
    assert first + rest == [f"g{g}b0" for g in range(1, 13)], first + rest
    assert again.info().status == "finished"
