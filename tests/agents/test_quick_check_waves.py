"""The quick check says, on a GPU, what the draft compiled to: each kernel's grid, registers, spills, warps and shared
memory, how many of its programs one SM holds at once and how many waves its grid makes. A relay model on
level1/35_GroupNorm_ (an H100) wrote a persistent ticket-wait kernel whose registers rose from 64 to 80 at 8 warps:
3 programs per SM, 528 programs in 1.33 waves, which it learned only after the verifier had timed the child."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from kernelwright.evaluators import EvalResult
from kernelwright.evaluators.facts import DeviceFacts, residency, waves_line
from kernelwright.evaluators.result import KernelLaunch
from kernelwright.tools.evaluation import Evaluations

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
from scripted import DIAGNOSIS, PROPOSAL, Scripted, call  # noqa: E402
from test_tuning import TimedEvaluator, gpu_run  # noqa: E402

pytestmark = pytest.mark.timeout(120)

H100 = DeviceFacts(device="cuda:0", name="NVIDIA H100 80GB HBM3", timed=True, admission="", sms=132,
                   smem_per_sm_bytes=233472, regs_per_sm=65536, max_threads_per_sm=2048)


@pytest.mark.parametrize(("compiled", "fit"), [
    ({"registers": 64, "num_warps": 4}, (8, "registers")),
    ({"registers": 80, "num_warps": 8}, (3, "registers")),  # the relay run's child: 528 programs in 1.33 waves
    ({"registers": 32, "num_warps": 4}, (16, "threads and registers")),
    ({"registers": 16, "num_warps": 1}, (32, "programs per SM")),
    ({"registers": 32, "num_warps": 4, "shared_bytes": 100_000}, (2, "shared memory")),
    ({"num_warps": 4}, None),  # nothing compiled (the interpreter): nothing said
])
def test_programs_an_sm_holds(compiled: dict[str, int], fit: tuple[int, str] | None) -> None:
    assert residency(compiled, H100) == fit


def test_the_waves_of_a_grid() -> None:
    # the largest grid it launched with is the problem's own (a test input's smaller launch comes first here)
    line = waves_line([{"name": "_gn_persistent", "grids": [[64], [528]],
                        "compiled": {"registers": 80, "spills": 0, "num_warps": 8, "shared_bytes": 2048}},
                       {"name": "_tail", "grids": [[8, 2]], "compiled": {"registers": 40, "num_warps": 4}},
                       {"name": "_third", "grids": [[1]], "compiled": {"registers": 40, "num_warps": 4}}], H100)
    # 1.33 waves: a partial second wave, said outright with the registers that would hold the grid in one
    assert line.startswith("compiled: _gn_persistent: grid 528 (80 registers, 0 spills, 8 warps, 2.05 KB shared); "
                           "grid exceeds resident capacity: 528 programs > 396 resident at once (3 per SM x 132 SMs, "
                           "limited by registers: 80 per thread), so 132 wait for a second, partial wave (1.33 "
                           "waves); at 64 registers or fewer, 4 per SM would hold all 528; _tail: grid 8x2") \
        and "_third" not in line
    many = waves_line([{"name": "_gn", "grids": [[4096]], "compiled": {"registers": 80, "num_warps": 8}}], H100)
    assert many == ("compiled: _gn: grid 4096 (80 registers, 8 warps); 3 programs per SM at once (limited by "
                    "registers), so 4096 programs make 10 waves on 132 SMs")
    assert waves_line([{"name": "k", "grids": [[4]], "compiled": {}}], H100) == ""


def test_the_coder_reads_them_after_a_quick_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU run (a fake evaluation service that answers as one), the quick check's reply to the coder names the
    draft's compiled kernel and its waves; the verdict is the same."""

    class Compiled(TimedEvaluator):
        def evaluate(self, source: str, quick: bool = False) -> EvalResult:
            result = super().evaluate(source, quick)
            if quick:
                result.kernels = [KernelLaunch(name="add_kernel", launches=1, grids=[[528]],
                                               compiled={"registers": 80, "spills": 0, "num_warps": 8})]
            return result

    monkeypatch.setattr(Evaluations, "facts", lambda self, device: H100)
    answers: list[Any] = [call("Diagnosis", DIAGNOSIS, 0), call("Proposal", PROPOSAL, 1),
                          call("search_replace", {"old": "BLOCK = 256\n", "new": "BLOCK = 512\n"}, 2),
                          call("quick_check", {}, 3), call("finish", {}, 4)]
    import test_tuning
    monkeypatch.setattr(test_tuning, "TimedEvaluator", Compiled)
    model = Scripted(script=answers)
    monkeypatch.setattr(test_tuning, "Scripted", lambda script: model)
    gpu_run(tmp_path, monkeypatch, answers)
    reply = next(m.content for m in model.seen[4] if getattr(m, "tool_call_id", None) == "quick_check-3")
    assert "pass" in reply and "compiled: add_kernel: grid 528 (80 registers, 0 spills, 8 warps); grid exceeds " \
                               "resident capacity: 528 programs > 396 resident at once (3 per SM x 132 SMs, limited " \
                               "by registers: 80 per thread), so 132 wait for a second, partial wave (1.33 waves); " \
                               "at 64 registers or fewer, 4 per SM would hold all 528" in reply
