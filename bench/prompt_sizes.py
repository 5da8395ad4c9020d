"""What a model-driven step sends to the model: characters per role and per step, on the same scripted run.

A three-step run of the bundled softmax example on the CPU (Triton's interpreter), driven by a scripted model
that gives the same answers whatever the prompts say: step 1 a knob change, step 2 a draft the quick check
fails, then the repair, step 3 another knob. Every request the roles make is recorded as the characters it
sends (the whole conversation, as a chat API receives it); tokens are estimated as characters / 4 (no
tokenizer is reachable offline). Because the answers are fixed, running this script on two commits measures
what a change of the prompts did to the same run (issue 23, "say things once"):

    python bench/prompt_sizes.py                     # this tree
    git worktree add /tmp/kw-before <commit> && cp bench/prompt_sizes.py /tmp/kw-before/bench/ \
        && (cd /tmp/kw-before && python bench/prompt_sizes.py)

Prints one line per role and step, then the totals per step; `--json FILE` writes them. `--gpu` gives the
roles what a GPU run shows them instead of the CPU's thin evidence: the facts, verdict and Nsight Compute profile
of the softmax example as measured on an H100 (`bench/evidence_bytes_check.py`, BENCHMARKS.md), fed to both
commits through the same functions (`Evaluations.facts`, `Evaluations.evidence`, the verdict's rendering).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TRITON_INTERPRET", "1")

from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from pydantic import Field  # noqa: E402

PROBLEM = ROOT / "examples" / "softmax" / "problem.py"
SEED = ROOT / "examples" / "softmax" / "seed.py"
MODEL = "scripted:sizes"


class Recorder(BaseChatModel):
    """Replays `script` in order and records the characters of every request."""

    script: list[AIMessage] = Field(default_factory=list)
    sent: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "recorder"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Recorder:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        chars = 0
        for m in messages:
            chars += len(m.content) if isinstance(m.content, str) else len(json.dumps(m.content))
            for c in getattr(m, "tool_calls", None) or []:
                chars += len(json.dumps(c["args"]))
        nxt = self.script.pop(0)
        self.sent.append({"answer": (nxt.tool_calls or [{}])[0].get("name"), "messages": len(messages), "chars": chars})
        return ChatResult(generations=[ChatGeneration(message=nxt)])


def _call(name: str, args: dict[str, Any], i: int) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"{name}-{i}", "type": "tool_call"}],
                     usage_metadata={"input_tokens": 0, "output_tokens": 0, "total_tokens": 0})


def script(seed: str) -> list[AIMessage]:
    diagnosis = {"bottleneck": "memory", "evidence": ["two passes over each row (the code reads x twice)"],
                 "headroom": None, "summary": "Bandwidth-bound; the row is read twice."}
    step1 = seed.replace("BLOCK_N = 2048", "BLOCK_N = 1024")
    wrong = step1.replace("inv_l = 1.0 / l", "inv_l = 0.5 / l")
    return [
        _call("Diagnosis", diagnosis, 0),
        _call("Proposal", {"category": "tiling", "what": "BLOCK_N 2048 -> 1024", "why": "more programs in flight",
                           "predicted_speedup": 1.05, "risk": "low", "key": "BLOCK_N=1024"}, 1),
        _call("search_replace", {"old": "BLOCK_N = 2048", "new": "BLOCK_N = 1024"}, 2),
        _call("quick_check", {}, 3),
        _call("finish", {}, 4),
        _call("Diagnosis", diagnosis, 5),
        _call("Proposal", {"category": "online", "what": "keep the normalisation in one pass",
                           "why": "the row is read twice", "predicted_speedup": 1.3, "risk": "medium",
                           "key": "one-pass"}, 6),
        _call("write_kernel", {"source": wrong}, 7),
        _call("quick_check", {}, 8),
        _call("view_kernel", {"start": 1, "end": 200}, 9),
        _call("write_kernel", {"source": step1.replace("NUM_WARPS = 8", "NUM_WARPS = 4")}, 10),
        _call("quick_check", {}, 11),
        _call("finish", {}, 12),
        _call("Diagnosis", diagnosis, 13),
        _call("Proposal", {"category": "warps", "what": "NUM_WARPS 8 -> 4", "why": "fewer warps, more programs",
                           "predicted_speedup": 1.02, "risk": "low", "key": "NUM_WARPS=4"}, 14),
        _call("search_replace", {"old": "NUM_WARPS = 8", "new": "NUM_WARPS = 4"}, 15),
        _call("finish", {}, 16),
    ]


ROLE_OF = {"Diagnosis": "analyst", "Proposal": "strategist"}

H100_TIMING = {
    "median_ms": 0.017312, "p25_ms": 0.017216, "p75_ms": 0.017632, "min_ms": 0.016864, "max_ms": 0.018208,
    "reps": 30, "wall_median_ms": 1.137, "noise_band": 0.0108, "eager_ms": 0.017768, "speedup_vs_eager": 1.026,
    "vs_eager": "faster", "compile_mode": "max-autotune-no-cudagraphs",
    "compile_modes": {"max-autotune": 0.032832, "max-autotune-no-cudagraphs": 0.014752, "default": 0.01688},
    "compile_ms": 0.014752, "speedup_vs_compile": 0.852, "vs_compile": "slower", "floor_ms": 0.012096,
    "bound": "memory", "fraction_of_floor": 0.699, "flops": 4194304.0, "bytes": 33554432.0,
    "bandwidth": 2.774e12, "compute_floor_ms": 8.18e-05, "best_baseline_ms": 0.014752,
    "best_baseline": "torch.compile"}
"""the softmax example's timing on an H100 80GB HBM3 (kernelwright eval --compile-mode max-autotune)"""
H100_KERNELS = [{"name": "softmax_kernel", "launches": 22, "grids": [[128], [1]],
                 "compiled": {"registers": 102, "spills": 0, "shared_bytes": 256, "num_warps": 8, "num_stages": 2},
                 "launches_per_forward": 1, "arg_bytes_per_forward": 33554432}]
H100_NCU = {"achieved_occupancy_pct": 12.24, "compute_sol_pct": 20.27, "dram_bytes_per_s": 1.1527e12, "dram_pct": 34.39,
            "dram_read_bytes": 16808960.0, "dram_write_bytes": 1856256.0, "duration_us": 16.192,
            "l2_bytes_per_s": 3.2798e12, "l2_hit_pct": 52.43, "l2_read_bytes": 25453568.0, "l2_write_bytes": 25175904.0,
            "memory_sol_pct": 34.39, "occupancy_limit_blocks": 32.0, "occupancy_limit_registers": 2.0,
            "occupancy_limit_shared_mem": 6.0, "occupancy_limit_warps": 8.0, "registers_per_thread": 102.0,
            "theoretical_occupancy_pct": 25.0, "waves_per_sm": 0.48}
H100_STALLS = {"long_scoreboard": 3.2, "wait": 1.1, "selected": 1.0}


def _only(model: Any, data: dict[str, Any]) -> Any:
    """`model` built from the fields of `data` it has (the two commits' models differ by a few fields)."""
    return model.model_validate({k: v for k, v in data.items() if k in model.model_fields})


def gpu_evidence() -> None:
    """Make the roles see the H100's facts, verdict and profile of the softmax example (see the module's doc)."""
    from kernelwright.agents import llm
    from kernelwright.evaluators import EvalResult
    from kernelwright.evaluators.facts import DeviceFacts
    from kernelwright.evaluators.profiling import KernelTime, NcuKernel, NcuReport, Profile
    from kernelwright.evaluators.result import Timing
    from kernelwright.tools.evaluation import Evaluations

    timing = _only(Timing, H100_TIMING)
    facts = _only(DeviceFacts, {
        "device": "cuda:0", "name": "NVIDIA H100 80GB HBM3", "timed": True, "compute_capability": "9.0",
        "admission": "A child is admitted as faster only when it beats its parent by more than the measurement's "
                     "noise band.", "sms": 132, "l2_bytes": 52_428_800, "smem_per_sm_bytes": 233_472,
        "smem_per_block_bytes": 232_448, "regs_per_sm": 65_536, "max_threads_per_sm": 2048,
        "memory_bytes": 85_000_000_000, "problem_bytes": 33_554_432, "copy_bytes_per_s": 2.77e12,
        "peak_copy_bytes_per_s": 3.0e12, "matmul_flops": {"fp32": 5.1e13, "tf32": 3.7e14, "bf16": 6.6e14,
                                                           "fp16": 6.6e14}})
    profile = _only(Profile, {
        "verdict": "pass", "reason": "ok", "timing": timing, "kernels": H100_KERNELS, "problem_bytes": 33554432.0,
        "breakdown": [KernelTime(name="softmax_kernel", calls=3, total_us=34.2, share=1.0)],
        "ncu": NcuReport(available=True, kernels=[NcuKernel(name="softmax_kernel", metrics=H100_NCU,
                                                            stalls=H100_STALLS)])})
    Evaluations.facts = lambda self, device: facts  # type: ignore[method-assign]
    Evaluations.evidence = lambda self, h: profile  # type: ignore[method-assign]

    def timed(result: Any) -> Any:
        if result is None or result.timing is not None:
            return result
        return EvalResult.model_validate({**result.model_dump(), "timing": timing.model_dump(), "device": "cuda:0"})

    for name in ("describe_eval", "standing"):  # how each commit renders the parent's verdict for a role
        if hasattr(llm, name):
            original = getattr(llm, name)
            setattr(llm, name, lambda result, _f=original: _f(timed(result)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--gpu", action="store_true", help="show the roles an H100's evidence instead of the CPU's")
    args = ap.parse_args(argv)
    if args.gpu:
        gpu_evidence()
    from rich.console import Console

    from kernelwright.optimize_command import run_optimize

    recorder = Recorder(script=script(SEED.read_text()))
    with tempfile.TemporaryDirectory() as tmp:
        summary = run_optimize(problem=PROBLEM, seed_kernel=SEED, model=MODEL, base_url=None, role_models=[],
                               iterations=3, time_budget=None, branches=1, device="cpu", precision=None, trials=1,
                               run_dir=Path(tmp) / "runs", resume=None, console=Console(file=io.StringIO()),
                               models={MODEL: recorder})
    if recorder.script:
        print(f"the run made fewer model calls than scripted ({len(recorder.script)} answers left; status "
              f"{summary.status}): the figures would not compare", file=sys.stderr)
        return 1
    steps: list[dict[str, int]] = []
    for r in recorder.sent:
        role = ROLE_OF.get(r["answer"] or "", "coder")
        if role == "analyst":
            steps.append(defaultdict(int))
        steps[-1][role] += r["chars"]
        steps[-1][f"{role}_calls"] += 1
    print(f"{'step':>4} {'analyst':>9} {'strategist':>11} {'coder':>9} {'coder calls':>12} {'total chars':>12} "
          f"{'~tokens':>8}")
    for i, s in enumerate(steps, 1):
        total = s["analyst"] + s["strategist"] + s["coder"]
        print(f"{i:>4} {s['analyst']:>9} {s['strategist']:>11} {s['coder']:>9} {s['coder_calls']:>12} {total:>12} "
              f"{total // 4:>8}")
    grand = sum(s["analyst"] + s["strategist"] + s["coder"] for s in steps)
    print(f"all {len(steps)} steps: {grand} characters sent, ~{grand // 4} tokens (characters / 4)")
    if args.json:
        Path(args.json).write_text(json.dumps({"steps": [dict(s) for s in steps], "requests": recorder.sent}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
