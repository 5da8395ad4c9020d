"""What each language-model role is shown (issue 10), read off the requests a scripted model receives in a
real run of the graph: the device's facts and what can be admitted, the parent's evidence, inspirations
from the archive, how predictions held, the playbook; each prompt within its stated bound. And on the CPU,
a verified child that cannot be timed is kept as "unmeasured" and the next step builds on it."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kernelwright.agents import briefing
from kernelwright.evaluators import DeviceFacts, Timing
from kernelwright.evaluators.facts import GPU_ADMISSION
from kernelwright.evaluators.profiling import KernelTime, NcuKernel, NcuReport, Profile
from kernelwright.optimize_command import run_optimize
from kernelwright.tools.evaluation import Evaluations
from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"
sys.path.insert(0, str(ROOT / "tests" / "agents"))
from scripted import DIAGNOSIS, PROPOSAL, Scripted, call  # noqa: E402


def optimize(run_dir: Path, models: dict[str, Any], **kw: Any):
    args = dict(problem=PROBLEM, seed_kernel=SEED, model="scripted:m", base_url=None, role_models=[], iterations=2,
                time_budget=None, branches=1, device="cpu", precision=None, trials=1, run_dir=run_dir, resume=None,
                console=Console(file=io.StringIO()), models=models)
    return run_optimize(**{**args, **kw})


def two_steps() -> Scripted:
    return Scripted(script=[
        call("Diagnosis", DIAGNOSIS, 0),
        call("Proposal", PROPOSAL, 1),                                                     # BLOCK=512, predicted 1.1
        call("search_replace", {"old": "BLOCK = 256\n", "new": "BLOCK = 512\n"}, 2),
        call("quick_check", {}, 3),
        call("finish", {}, 4),
        call("Diagnosis", DIAGNOSIS, 4),
        call("Proposal", {**PROPOSAL, "what": "NUM_WARPS 4 -> 8", "key": "NUM_WARPS=8", "category": "warps",
                          "predicted_speedup": 1.05}, 5),
        call("search_replace", {"old": "NUM_WARPS = 4\n", "new": "NUM_WARPS = 8\n"}, 6),
        call("finish", {}, 7),
    ])


def prompt_of(m: Scripted, call_index: int) -> str:
    return m.seen[call_index][0].content  # the first message of a role's conversation is its prompt


def extra_chars(prompt: str, *sources: str) -> int:
    """What a prompt holds beyond the problem's and the parent's sources."""
    n = len(prompt)
    for s in sources:
        assert s in prompt
        n -= len(s)
    return n


@pytest.mark.timeout(300)
def test_cpu_roles_are_told_nothing_is_timed_and_build_on_the_unmeasured_child(tmp_path: Path) -> None:
    m = two_steps()
    summary = optimize(tmp_path, {"scripted:m": m})
    assert not m.script, "both steps ran"
    run = RunStore(tmp_path).open(summary.run_id)
    first, second = run.trace()
    # step 1's child is verified but untimed: kept, not failed, and step 2 starts from it
    assert first["verdict"] == "pass" and first["decision"]["decision"] == "unmeasured"
    assert first["decision"]["predicted_speedup"] == 1.1 and first["decision"]["measured_speedup"] is None
    assert second["parent"] == first["child"], "the verified idea was not built on"
    assert "BLOCK = 512" in run.kernel(second["child"]) and "NUM_WARPS = 8" in run.kernel(second["child"])
    assert second["decision"]["decision"] == "unmeasured" and second["schema_version"] == 4

    problem, seed, child = PROBLEM.read_text(), SEED.read_text(), run.kernel(first["child"])
    analyst1, strategist1, coder1 = prompt_of(m, 0), prompt_of(m, 1), prompt_of(m, 2)
    # the device and what can be admitted on it, before the step
    for p in (analyst1, strategist1, coder1):
        assert "nothing is timed" in p
    assert "kept as 'unmeasured'" in strategist1
    # the profile says what its figures are and why the rest is missing
    assert "launches counted over every checked forward" in analyst1
    assert "compiled resources unavailable (nothing is compiled in Triton's interpreter)" in analyst1
    assert "device-time breakdown unavailable: no GPU" in analyst1
    # the coder is told what a candidate may do besides its kernels, and that it edits the parent
    assert "torch.zeros" in coder1 and ".contiguous()" in coder1 and "you edit the parent" in coder1
    assert "run the verifier on the current kernel (Triton's interpreter" in coder1
    # the playbook, and structural moves, reach the strategist
    shown = strategist1.split("## What is known to work here")[1]  # chosen for the problem's kind (elementwise)
    assert "large-blocks-then-structure" in shown and "matmul" not in shown
    assert "persistent" in strategist1 and "memory_access" in strategist1

    strategist2 = prompt_of(m, 6)
    # the lineage's history says the first change was verified but not timed, and is the parent now; the analyst
    # of step 2 reads it too (a parent read again after a step is read in the light of that step)
    assert "BLOCK=512: unmeasured; verified, not timed" in strategist2
    assert "BLOCK=512: unmeasured; verified, not timed" in prompt_of(m, 5)
    assert "## The last steps on this lineage" in analyst1 and "(none yet)" in analyst1
    assert "await a GPU measurement" in strategist2
    # the parent is named: which step made it and what is known of its speed, for every role
    label = f"## The parent kernel ({first['child'][:12]}: the child of step g1b0 (BLOCK=512); verified correct, not timed)"
    for i in (5, 6, 7):
        assert label in prompt_of(m, i)
    assert f"## The parent kernel ({first['parent'][:12]}: the seed; verified correct, not timed)" in analyst1
    # inspirations never repeat the parent's own ancestors (the seed here): none yet on this one-branch run
    insp = strategist2.split("## Other kernels in the archive")[1].split("## Earlier steps")[0]
    assert "(none yet" in insp and "+BLOCK = 256" not in insp
    # the coder is told the problem gives no get_test_inputs, and the quick check's reply says what ran
    assert "This problem gives no get_test_inputs()" in coder1
    replies = [msg.content for msg in m.seen[4] if msg.type == "tool"]
    assert any("worst error" in r and "only the problem's own shapes" in r for r in replies), replies
    # the stated bounds: what the roles see beyond the two sources stays within budget
    assert extra_chars(strategist2, problem, child) <= briefing.STRATEGIST_EXTRA_CHARS
    assert extra_chars(prompt_of(m, 7), problem, child) <= briefing.CODER_EXTRA_CHARS
    assert extra_chars(analyst1, problem, seed) <= briefing.STRATEGIST_EXTRA_CHARS


GPU_FACTS = DeviceFacts(device="cuda:0", name="NVIDIA H100 80GB HBM3", timed=True, admission=GPU_ADMISSION,
                        compute_capability="9.0", sms=132, l2_bytes=52_428_800, smem_per_sm_bytes=233_472,
                        smem_per_block_bytes=232_448, regs_per_sm=65_536, max_threads_per_sm=2048,
                        memory_bytes=85_000_000_000, problem_bytes=12_000, copy_bytes_per_s=2.9e11,
                        peak_copy_bytes_per_s=2.95e12, matmul_flops={"fp32": 5.1e13, "bf16": 6.6e14})


def gpu_profile() -> Profile:
    return Profile(
        verdict="pass", reason="ok",
        timing=Timing(median_ms=0.0082, p25_ms=0.008, p75_ms=0.0084, min_ms=0.0079, max_ms=0.009, reps=30,
                      wall_median_ms=0.02, noise_band=0.015, eager_ms=0.0085, speedup_vs_eager=1.04,
                      vs_eager="no change", floor_ms=0.0041, bound="memory", fraction_of_floor=0.5,
                      best_baseline_ms=0.0085, best_baseline="eager"),
        kernels=[{"name": "add_kernel", "launches": 20, "grids": [[4, 1, 1]],
                  "compiled": {"registers": 18, "spills": 0, "shared_bytes": 0, "num_warps": 4, "num_stages": 3}}],
        breakdown=[KernelTime(name="add_kernel", calls=3, total_us=7.5, share=0.91)],
        ncu=NcuReport(available=True, kernels=[NcuKernel(
            name="add_kernel", metrics={"duration_us": 2.4, "memory_sol_pct": 71.0, "compute_sol_pct": 9.0,
                                        "achieved_occupancy_pct": 44.0, "dram_pct": 68.0},
            stalls={"long_scoreboard": 6.2, "wait": 1.1})]))


@pytest.mark.timeout(300)
def test_gpu_evidence_and_facts_reach_every_role(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU's facts and a stored profile (as the loop stores one for the seed and each new elite) are
    what the analyst and strategist read; the builtin analyst reads the same Nsight Compute metrics."""
    monkeypatch.setattr(Evaluations, "facts", lambda self, device: GPU_FACTS)
    monkeypatch.setattr(Evaluations, "evidence", lambda self, h: gpu_profile())
    m = two_steps()
    m.script = m.script[:5]
    optimize(tmp_path, {"scripted:m": m}, iterations=1)
    analyst, strategist, coder = prompt_of(m, 0), prompt_of(m, 1), prompt_of(m, 2)
    for p in (analyst, strategist, coder):
        assert "NVIDIA H100 80GB HBM3" in p and "132 SMs" in p and "L2 52.4 MB" in p
    # the analyst reads the profile and the device's measured peaks
    assert "memory SOL 71%" in analyst and "occupancy achieved 44%" in analyst
    assert "top stalls long_scoreboard 6.2" in analyst and "add_kernel 2.5 µs×3 (91%)" in analyst
    assert "registers 18" in analyst and "0.0082 ms" in analyst and "achieves 50% of it" in analyst
    assert "measured copy bandwidth at that size 290 GB/s" in analyst and "bf16 660 TFLOP/s" in analyst
    # the strategist reads the analyst's diagnosis and where the parent stands, not the analyst's inputs again
    assert "## Where the parent stands\npass (ok)" in strategist and "## The analyst's diagnosis" in strategist
    assert "faster than its parent by more than the measurement's noise band" in strategist
    for p in (strategist, coder):
        assert "memory SOL 71%" not in p and "bf16 660 TFLOP/s" not in p and "top stalls" not in p

    # the builtin analyst uses the stored Nsight Compute reading too
    summary = optimize(tmp_path / "b", {}, model="builtin", iterations=1)
    (rec,) = RunStore(tmp_path / "b").open(summary.run_id).trace()
    assert "memory SOL 71%" in rec["diagnosis"]["evidence"] and rec["diagnosis"]["bottleneck"] == "memory"
