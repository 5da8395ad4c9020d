"""bench/compare_traces.py: two runs whose steps differ only in what varies from run to run (clock times, error
magnitudes, durations) are identical; a different proposal or decision is a difference."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "compare_traces.py"


def _module():
    spec = importlib.util.spec_from_file_location("compare_traces", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _run(path: Path, **changes) -> Path:
    record = {"step": 0, "step_id": "g1b0", "generation": 1, "branch": 0, "parent": "aa", "child": "bb",
              "proposal": {"key": "BLOCK=4"}, "coder": {"diff": "-BLOCK = 8\n+BLOCK = 4"}, "verdict": "pass",
              "result": {"reason": "ok", "detail": "correct on 22 trials; worst error 3.3e-07"},
              "decision": {"decision": "unmeasured", "reason": "untimed", "why": "verified, not timed"},
              "outcome": {"kernels": [{"name": "k", "launches": 22, "grids": [[256], [1]]}]},
              "time": "2026-11-26T23:54:03", "verify_s": 113.2}
    for key, value in changes.items():
        record[key] = value
    path.mkdir()
    (path / "trace.jsonl").write_text(json.dumps(record) + "\n")
    return path


def test_what_varies_between_runs_is_left_out_and_a_changed_decision_is_not(tmp_path: Path, capsys) -> None:
    ct = _module()
    a = _run(tmp_path / "a")
    same = _run(tmp_path / "b", time="2026-11-27T00:01:00", verify_s=80.0,
                result={"reason": "ok", "detail": "correct on 20 trials; worst error 2.9e-07"},
                outcome={"kernels": [{"name": "k", "launches": 22, "grids": [[1], [256]]}]})
    assert ct.main([str(a), str(same)]) == 0 and "identical: 1 steps" in capsys.readouterr().out
    reviewed = _run(tmp_path / "r1", review={"decision": "approve", "at": "2026-11-26T23:54:03", "by": "a@h"})
    again = _run(tmp_path / "r2", review={"decision": "approve", "at": "2026-11-27T00:04:03", "by": "b@g"})
    assert ct.main([str(reviewed), str(again)]) == 0
    capsys.readouterr()
    other = _run(tmp_path / "c", proposal={"key": "BLOCK=16"})
    assert ct.main([str(a), str(other)]) == 1 and "proposal differs" in capsys.readouterr().out
    rejected = _run(tmp_path / "d", decision={"decision": "rejected", "reason": "ok", "why": "slower"})
    assert ct.main([str(a), str(rejected)]) == 1 and "decision differs" in capsys.readouterr().out
    assert ct.main([str(a), str(tmp_path)]) == 2
