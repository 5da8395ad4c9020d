"""The run directory: the trace read incrementally, a record cut short by a kill, archive versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelwright.tools.runstore import RunError, RunStore


def test_trace_is_read_incrementally_and_from_other_handles(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    run = store.create("p.py", "source", {})
    assert run.trace() == []
    assert run.append_step({"step_id": "g1b0", "x": 1})
    other = store.open(run.id)  # a second handle (a node opens its own) sees the same records
    assert [r["step_id"] for r in other.trace()] == ["g1b0"]
    assert other.append_step({"step_id": "g1b1"})
    assert not run.append_step({"step_id": "g1b0", "x": 2}), "a replayed step must not be written twice"
    assert [r["step_id"] for r in run.trace()] == ["g1b0", "g1b1"]
    assert run.trace()[0]["x"] == 1


def test_a_record_cut_short_by_a_kill_does_not_swallow_the_next(tmp_path: Path) -> None:
    run = RunStore(tmp_path).create("p.py", "source", {})
    run.append_step({"step_id": "g1b0"})
    with open(run.path / "trace.jsonl", "a") as f:
        f.write('{"step_id": "g1b1", "half')  # the process died mid-write
    assert [r["step_id"] for r in run.trace()] == ["g1b0"]
    assert run.append_step({"step_id": "g1b1"})  # the replayed step is written whole, on its own line
    assert [r["step_id"] for r in run.trace()] == ["g1b0", "g1b1"]
    lines = (run.path / "trace.jsonl").read_text().splitlines()
    assert json.loads(lines[-1]) == {"step_id": "g1b1"} and len(lines) == 3


def test_archive_versions_keep_the_last_three(tmp_path: Path) -> None:
    run = RunStore(tmp_path).create("p.py", "source", {})
    for g in range(6):
        run.put_archive(g, {"generation": g})
    assert sorted(p.name for p in (run.path / "archive").glob("*.json")) == ["000003.json", "000004.json", "000005.json"]
    assert run.archive(5) == {"generation": 5}
    with pytest.raises(RunError, match="generation 1"):
        run.archive(1)


def test_the_live_view_shows_budget_used(tmp_path: Path) -> None:
    import io
    import time

    from rich.console import Console

    from kernelwright.optimize_command import _view
    from kernelwright.progress import duration as _duration

    run = RunStore(tmp_path).create("p.py", "source", {})
    created = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 125))
    run.update(created=created, steps=3, tokens=1234, cost_usd=0.5, best_speedup=1.25, best_kernel="d9e22c9455f8",
               config={"settings": {"iterations": 10, "time_budget_s": 3600, "token_budget": 5000,
                                   "cost_budget_usd": 2.0, "device": "cuda:0"}})
    out = io.StringIO()
    Console(file=out, width=120).print(_view(run.info(), "g2b1: BLOCK_N 1024 -> 2048 -> pass ok"))
    text = out.getvalue()
    for words in ("3 / 10", "1.250× eager", "2m0", "/ 1h00m", "1234 / 5000 tokens, $0.5000 / $2.00",
                  "g2b1: BLOCK_N 1024 -> 2048 -> pass ok"):
        assert words in text, text
    assert [_duration(x) for x in (5, 65, 3600 * 8)] == ["5s", "1m05s", "8h00m"]


def test_a_run_json_written_before_settings_had_their_name_is_read(tmp_path) -> None:
    """run.json's `config.settings` was called `context` (beside the live RunContext) until 2026-11-27: a run
    written then still resumes with its settings, and is written back under the new name."""
    import json

    from kernelwright.tools.runstore import RunStore

    run = RunStore(tmp_path).create("p.py", "source", {})
    data = json.loads((run.path / "run.json").read_text())
    data["config"] = {"seed_kernel": None, "context": {"branches": 3, "device": "cpu"}}
    (run.path / "run.json").write_text(json.dumps(data))
    assert run.info().config.settings == {"branches": 3, "device": "cpu"}
    run.update(steps=1)
    written = json.loads((run.path / "run.json").read_text())["config"]
    assert written["settings"] == {"branches": 3, "device": "cpu"} and "context" not in written
