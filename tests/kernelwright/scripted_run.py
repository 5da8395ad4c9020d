"""A real run on the CPU driven by a scripted model, for the tests of what is read from a finished run
(report, export, handoff): three steps through the real graph on the add problem (tests/graphs), one of
them a wrong kernel the verifier fails, with the analyst's reasoning text, token counts and prices.

    runs_dir, run_id = scripted_run(tmp_path)

The API key named in `SECRET` is in the environment while the run is made (as a provider's key would be),
so tests can check that nothing read from the run carries it.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"
sys.path.insert(0, str(ROOT / "tests" / "agents"))
from scripted import DIAGNOSIS, PROPOSAL, Scripted, call  # noqa: E402

SECRET = "sk-kwtest-0123456789abcdef-must-never-leak"
MODEL = "scripted:report"

STEP1 = SEED.read_text().replace("BLOCK = 256\n", "BLOCK = 512\n")
WRONG = STEP1.replace("tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m)",
                      "tl.load(x + offs, mask=m) - tl.load(y + offs, mask=m)")


def script() -> list:
    """Step 1: BLOCK 256 -> 512 (passes). Step 2: a kernel that subtracts, which the quick check fails, so the
    coder gives up (no child). Step 3: NUM_WARPS 4 -> 8 (passes)."""
    thought = call("Diagnosis", DIAGNOSIS, 0)
    thought.additional_kwargs["reasoning_content"] = "Two loads and a store per element: bandwidth-bound."
    return [
        thought,
        call("Proposal", PROPOSAL, 1),
        call("search_replace", {"old": "BLOCK = 256\n", "new": "BLOCK = 512\n"}, 2),
        call("quick_check", {}, 3),
        call("finish", {}, 4),
        call("Diagnosis", {**DIAGNOSIS, "summary": "Still bandwidth-bound; try fusing the loads."}, 5),
        call("Proposal", {"category": "fusion", "what": "load both operands in one vector", "why": "fewer loads",
                          "predicted_speedup": 1.3, "risk": "high", "key": "fused-load"}, 6),
        call("write_kernel", {"source": WRONG}, 7),
        call("quick_check", {}, 8),
        call("write_kernel", {"source": STEP1}, 80),
        call("finish", {}, 81),
        call("Diagnosis", DIAGNOSIS, 9),
        call("Proposal", {"category": "warps", "what": "NUM_WARPS 4 -> 8", "why": "more warps to hide latency",
                          "predicted_speedup": 1.05, "risk": "low", "key": "NUM_WARPS=8"}, 10),
        call("search_replace", {"old": "NUM_WARPS = 4\n", "new": "NUM_WARPS = 8\n"}, 11),
        call("finish", {}, 12),
    ]


def scripted_run(tmp_path: Path) -> tuple[Path, str]:
    """Make the run; returns (the runs folder, the run's id)."""
    from kernelwright.optimize_command import run_optimize

    runs = tmp_path / "runs"
    old = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = SECRET
    try:
        summary = run_optimize(problem=PROBLEM, seed_kernel=SEED, model=MODEL, base_url=None, role_models=[],
                               iterations=3, time_budget=None, branches=1, device="cpu", precision=None, trials=1,
                               run_dir=runs, resume=None, console=Console(file=io.StringIO()),
                               prices=[f"{MODEL}=3/15"], models={MODEL: Scripted(script=script())})
    finally:
        if old is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = old
    assert summary.status == "finished", summary
    return runs, summary.run_id
