"""Issue 10 on a GPU: a scripted model drives one step of the real loop on cuda; what the roles are shown
comes from the device (its facts, the seed's profile collected in the loop) and the coder's quick check runs
on the GPU through the run's evaluator. `make test-gpu`; skipped without CUDA."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console

from kernelwright.optimize_command import run_optimize
from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "agents"))
from scripted import DIAGNOSIS, PROPOSAL, Scripted, call  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.timeout(900)
def test_one_gpu_step_shows_real_facts_and_evidence(tmp_path: Path) -> None:
    m = Scripted(script=[
        call("Diagnosis", DIAGNOSIS, 0),
        call("Proposal", PROPOSAL, 1),
        call("search_replace", {"old": "BLOCK = 256\n", "new": "BLOCK = 512\n"}, 2),
        call("quick_check", {}, 3),
        call("finish", {}, 4),
    ])
    t0 = time.monotonic()
    summary = run_optimize(problem=ROOT / "tests" / "graphs" / "add_problem.py",
                           seed_kernel=ROOT / "tests" / "graphs" / "add_seed.py", model="scripted:gpu", base_url=None,
                           role_models=[], iterations=1, time_budget=None, branches=1, device="cuda", precision=None,
                           trials=2, run_dir=tmp_path, resume=None, console=Console(file=io.StringIO()),
                           models={"scripted:gpu": m})
    wall = time.monotonic() - t0
    assert not m.script, "the step did not run to the end"
    run = RunStore(tmp_path).open(summary.run_id)
    (rec,) = run.trace()
    analyst, strategist, coder = (m.seen[i][0].content for i in (0, 1, 2))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for p in (analyst, strategist, coder):
        assert torch.cuda.get_device_name(0) in p and f"{sms} SMs" in p
    # the seed was profiled in the loop: the analyst reads a device-time breakdown, Nsight Compute or why not,
    # the measured bandwidth and the floor; the strategist reads the analyst's diagnosis instead (issue 23)
    assert (run.path / "profiles" / f"{rec['parent']}.json").exists()
    # an elite child is profiled (the next step's parent); a losing one only for later prompts' history lines, so
    # never in a run's last generation, where no later prompt reads it (`archiving.profile_losers`)
    elite = rec["decision"]["decision"] == "elite"
    assert (run.path / "profiles" / f"{rec['child']}.json").exists() == elite, rec["decision"]["decision"]
    assert "device time by kernel (torch.profiler" in analyst and "add_kernel" in analyst
    assert ("Nsight Compute (SOL" in analyst) or ("Nsight Compute unavailable: " in analyst)
    assert "roofline floor" in analyst and "measured copy bandwidth" in analyst
    assert "## The analyst's diagnosis" in strategist and "## Where the parent stands" in strategist
    for p in (strategist, coder):
        assert "device time by kernel (torch.profiler" not in p and "measured copy bandwidth" not in p
    # the coder's quick check ran on the GPU: correctness, and a rough time that admits nothing (issue 23)
    assert "compile the current kernel and run it on the GPU" in coder
    tool_replies = [msg.content for msg in m.seen[4] if msg.type == "tool"]
    assert any(t.startswith("pass: correct on") and "rough, one measurement, never used to admit anything" in t
               for t in tool_replies), tool_replies
    # the child was timed: the step records predicted beside measured
    assert rec["verdict"] == "pass" and rec["decision"]["measured_speedup"] is not None
    assert rec["decision"]["predicted_speedup"] == 1.1
    print(f"one GPU step with evidence: {wall:.1f} s")
