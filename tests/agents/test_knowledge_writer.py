"""Memory across runs, said whole and said first (issue 23, item 3, after a relay model's GroupNorm run on an H100).

The model read store entries that broke off inside their values ('BLOCK 40…', 'nprog computed first as min(NCH…'):
an entry keeps what the proposal said whole up to a bound that fits real proposals, and a longer one is cut between
clauses, never inside a number or a name; the strategist's block shows fewer entries rather than cut ones. And the
first-kernel writer, which saw no entry at all, is shown the store's entries for its problem's kinds (the same
problem's first), labelled with the GPU they were measured on, unless the run leaves the store out. The writer runs
in the real graph with a scripted model and a fake evaluation service that answers as a GPU does. No network, no
GPU, no Triton interpreter."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from kernelwright.agents.archive import Archive, Entry, Step
from kernelwright.agents.briefing import PLAYBOOK_CHARS
from kernelwright.agents.context import RunConfig, RunContext
from kernelwright.agents.playbook import knowledge_entry, playbook_for
from kernelwright.agents.schemas import Diagnosis
from kernelwright.evaluators import DeviceFacts, EvalResult, Timing
from kernelwright.graphs.optimize import builder, initial_state
from kernelwright.tools.evaluation import Evaluations
from kernelwright.tools.knowledge import Knowledge, KnowledgeStore
from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
ADD = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = (ROOT / "tests" / "graphs" / "add_seed.py").read_text()
sys.path.insert(0, str(Path(__file__).parent))
from scripted import Scripted, call  # noqa: E402

pytestmark = pytest.mark.timeout(120)

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"

# the shape of the relay model's proposals on 35_GroupNorm_ (about 450 characters, numbers and names all through)
MOVE = ("Shrink the lag margin: in forward, LAG = PG + nprog * LAG_PROGS -> LAG = PG + max(1, nprog // 2), computed in "
        "integers; NTICKET = NCHUNK + LAG follows. Kernel body, BLOCK 4096, 8 warps, 528 programs unchanged. nprog is "
        "computed first as min(NCHUNK, 4 * 132) = 528 and the ticket wait stays only on smaller tickets, so a group's "
        "mean and rstd are published packed into one int64 (two float32 halves) and read with one atomic load, "
        "ready flag 0x7fc00000 meaning not yet")
LONG_MOVE = MOVE + (". Then the second pass re-reads x from L2 within a reuse window of 17 MB (512 + 528 tiles of "
                    "16 KB), the stats of 2048 groups at 8 bytes each in 16 KB of L2, y written with evict_first, the "
                    "grid 528 programs of 8 warps, two per SM on 132 SMs, registers 96 per thread, BLOCK_C 64 and "
                    "BLOCK_HW 4096 kept, NUM_STAGES 3 for the loads of the second pass, num_ctas 1")
EVIDENCE = ("reuse distance from structure: LAG = PG + nprog = 512 + 528 chunks x 16 KB = about 17 MB of x read plus "
            "about 17 MB of y written between the first read and the re-read of a chunk, DRAM read 9.39 GB where 4.7 "
            "GB are needed, L2 hit 56 %, 5972.5 us, measured 0.980x")


def _cut_between_clauses(kept: str, said: str) -> None:
    """`kept` is `said` cut at a sentence or clause boundary, with an ellipsis: never inside a value."""
    assert kept.endswith(" …") and len(kept) < len(said), kept
    head = kept.removesuffix(" …")
    assert said.startswith(head), head
    assert said[len(head):len(head) + 2] in (" ", ", ", "; ") or head.endswith("."), said[len(head) - 10:len(head) + 10]


def test_an_entry_keeps_a_long_move_whole_and_cuts_a_longer_one_between_clauses(tmp_path: Path) -> None:
    run = RunStore(tmp_path / "runs").create(str(ADD), ADD.read_text(), {})
    archive = Archive(entries={"p": Entry(id="p", noise_band=0.01)})
    step = Step(step=0, step_id="g1b0", parent_id="p", proposal_key="lag-margin-half-nprog", child_id="c",
                verdict="pass", reason="ok", measured_speedup=1.06, decision="elite", why="")

    def entry(what: str, evidence: str) -> Knowledge:
        result = {"proposal": {"category": "pipelining", "what": what},
                  "diagnosis": {"bottleneck": "memory", "evidence": [evidence]}, "outcome": {"noise_band": 0.01}}
        return knowledge_entry(run, result, step, archive, versions={"gpu": H100}, gpu=None, strategist="openai:m")

    kept = entry(MOVE, EVIDENCE)
    assert len(MOVE) > 450 and kept.what == MOVE  # whole: BLOCK 4096, min(NCHUNK, 4 * 132), the int64 packing
    assert kept.evidence == [EVIDENCE]
    longer = entry(LONG_MOVE, EVIDENCE + ", " + EVIDENCE)
    _cut_between_clauses(longer.what, LONG_MOVE)
    _cut_between_clauses(longer.evidence[0], EVIDENCE + ", " + EVIDENCE)
    assert longer.what.startswith(MOVE)  # what fits is all there
    # an entry a store kept before (cut mid-word at 300 characters) still loads and is shown as it is
    path = tmp_path / "old.jsonl"
    path.write_text(kept.model_copy(update={"what": MOVE[:299] + "…"}).model_dump_json() + "\n")
    (old,) = KnowledgeStore(path).entries()
    assert MOVE[:299] + "…" in playbook_for(["elementwise"], None, H100, [old])


def learned(run: str, problem: str, kinds: list[str], key: str, speedup: float, gpu: str = H100,
            **kw: Any) -> Knowledge:
    return Knowledge.model_validate({
        "id": f"{run}/g1b0", "date": "2026-11-26T04:40:00", "run_id": run, "step_id": "g1b0", "problem": problem,
        "kinds": kinds, "gpu": gpu, "bottleneck": "memory", "evidence": ["DRAM read 1.06 GB where 570 MB are needed"],
        "category": "memory_access", "key": key, "what": f"{key}: load four contiguous elements per lane",
        "speedup": speedup, "noise_band": 0.02, **kw})


def test_the_strategists_block_shows_fewer_entries_rather_than_cut_ones() -> None:
    evidence = [EVIDENCE[:290], "occupancy 50 %, registers 96", "grid of 528 programs"]
    store = [learned(f"r{i}", "35_GroupNorm_", ["row_reduction"], f"move-{i}", 1.3 - i / 100,
                     what=f"{i}: {LONG_MOVE[:590]}", evidence=evidence) for i in range(3)]
    diagnosis = Diagnosis(bottleneck="memory", summary="the design reads x twice", evidence=["DRAM 2.88 TB/s"])
    text = playbook_for(["row_reduction"], diagnosis, H100, store)
    assert len(text) <= PLAYBOOK_CHARS and "[truncated]" not in text
    assert "more entries not shown" in text or "more entry not shown" in text
    shown = [k for k in store if k.key in text]
    assert shown, text  # the best of the earlier runs keeps its place
    for k in shown:
        assert k.what in text and k.evidence[0] in text  # whole, with every value in it
    assert "From the shipped playbook:" in text  # and the shipped playbook keeps a share


# -- the first-kernel writer, through the real graph -----------------------------------------------------------


def _timed(ms: float, gpu: str) -> EvalResult:
    t = Timing(median_ms=ms, p25_ms=ms, p75_ms=ms, min_ms=ms, max_ms=ms, reps=30, wall_median_ms=ms, noise_band=0.02,
               eager_ms=2.0, speedup_vs_eager=2.0 / ms, vs_eager="faster", compile_ms=1.0, speedup_vs_compile=1.0 / ms,
               floor_ms=0.4, fraction_of_floor=0.4 / ms, bound="memory", best_baseline_ms=1.0,
               best_baseline="torch.compile")
    return EvalResult(verdict="pass", reason="ok", detail="fake: verified and timed", device="cuda:0", timing=t,
                      families=["base", "test_inputs"], versions={"gpu": gpu, "torch": "2.11", "triton": "3.6"})


class OnH200:
    """Answers as an evaluator on an H200 does: quick checks pass; a kernel is verified and timed."""

    def evaluate(self, source: str, quick: bool = False) -> EvalResult:
        if quick:
            return EvalResult(verdict="pass", reason="ok", detail="fake quick check", device="cuda:0",
                              families=["base", "test_inputs"])
        return _timed(1.0, H200)

    def device_facts(self) -> DeviceFacts:
        return DeviceFacts(device="cuda:0", name=H200, timed=True, admission="fake")

    def close(self) -> None:
        pass


STORE = [learned("r-mul", "mul_problem", ["elementwise"], "wide-loads-8", 1.5),
         learned("r-add", "add_problem", ["elementwise"], "same-problem-move", 1.1),  # this problem: first
         learned("r-sub", "sub_problem", ["elementwise"], "two-per-lane", 1.3),
         learned("r-neg", "neg_problem", ["elementwise"], "tiny-gain", 1.05),  # the fourth: past the limit
         learned("r-mm", "mm_problem", ["matmul"], "BLOCK_N=64", 2.0)]  # another kind


def _writers_prompt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **config: Any) -> str:
    """Run the seed step of the real graph on the add problem with no seed kernel, as on an H200, with `STORE` in
    the knowledge store; the first request the writer's model saw."""
    path = tmp_path / "knowledge.jsonl"
    for k in STORE:
        KnowledgeStore(path).append(k)
    monkeypatch.setattr(Evaluations, "evaluator", lambda self, device: OnH200())
    run = RunStore(tmp_path / "runs").create(str(ADD), ADD.read_text(), {})
    cfg = RunConfig(model="scripted:w", device="cuda:0", profile="off", trials=1, branches=1, iterations=1,
                    roofline_target=None, knowledge=str(path), **config)
    run.update(config={"settings": cfg.as_dict()})
    model = Scripted(script=[call("write_kernel", {"source": SEED}, 0), call("finish", {}, 1)])
    ctx = RunContext.open(cfg, run, models={"scripted:w": model})
    try:
        for update in builder().compile(checkpointer=InMemorySaver()).stream(
                initial_state(), {"configurable": {"thread_id": "w"}}, context=ctx, stream_mode="updates"):
            if "seed" in update:
                break
    finally:
        ctx.close()
    assert run.info().config.seed_kernel is not None
    prompt = model.seen[0][0].content
    assert "writing the first kernel" in prompt
    return str(prompt)


def test_the_first_kernel_writer_is_shown_what_earlier_runs_learned_on_its_kind_unless_the_run_leaves_it_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prompt = _writers_prompt(tmp_path / "with", monkeypatch)
    block = prompt.split("## What earlier runs learned on problems of this kind")[1]
    assert "From earlier runs on this machine (the knowledge store; what their steps measured):" in block
    # the same problem's first, then by measured gain; at most three; of the problem's kind only
    order = [block.index(key) for key in ("same-problem-move", "wide-loads-8", "two-per-lane")]
    assert order == sorted(order)
    assert "tiny-gain" not in prompt and "BLOCK_N=64" not in prompt
    assert "run r-add, step g1b0, on an H100; this run is on an H200, problem add_problem (elementwise)" in block
    assert "memory_access wide-loads-8: wide-loads-8: load four contiguous elements per lane -> 1.50x over its " \
           "parent (noise ±2.0 %)" in block
    assert "shipped playbook" not in prompt and "[large-blocks-then-structure]" not in prompt

    # --no-knowledge: the same store, nothing of it shown
    prompt = _writers_prompt(tmp_path / "without", monkeypatch, use_knowledge=False)
    assert "What earlier runs learned" not in prompt and "From earlier runs" not in prompt
    for k in STORE:
        assert k.key not in prompt and k.run_id not in prompt
