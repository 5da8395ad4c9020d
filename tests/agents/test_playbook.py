"""The playbook chosen, not dumped, and memory across runs (issue 23, items 2 and 3).

The shipped playbook is data whose every entry states a pattern, its problem kinds and bottlenecks, its effect and
the GPU it was measured on; a strategist is shown the few entries of its problem's kind that fit its diagnosis,
labelled with that GPU, and what earlier runs measured on problems of its kind, with their provenance. Winning
steps are recorded in the knowledge store; a second run on a similar problem is shown the first run's winning
move. The loop runs the real graph with a scripted model and a fake evaluation service that answers as a GPU
does (timed). No network, no GPU, no Triton interpreter."""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from kernelwright import prompts
from kernelwright.agents.archive import Archive, Entry, Step
from kernelwright.agents.context import RunConfig, RunContext
from kernelwright.agents.playbook import (choose_learned, choose_shipped, gpu_short, playbook_for, shipped,
                                          winning)
from kernelwright.agents.records import StepRecord
from kernelwright.agents.schemas import Bottleneck, Category, Diagnosis
from kernelwright.evaluators import DeviceFacts, EvalResult, Timing
from kernelwright.evaluators.kinds import KINDS
from kernelwright.graphs.optimize import builder, initial_state
from kernelwright.tools.evaluation import Evaluations
from kernelwright.tools.knowledge import Knowledge, KnowledgeStore
from kernelwright.tools.runstore import Run, RunStore

ROOT = Path(__file__).resolve().parents[2]
ADD = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = (ROOT / "tests" / "graphs" / "add_seed.py").read_text()
sys.path.insert(0, str(Path(__file__).parent))
from scripted import DIAGNOSIS, Scripted, call  # noqa: E402

pytestmark = pytest.mark.timeout(300)

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
LAYER_NORM = Diagnosis(bottleneck="occupancy", evidence=["grid of 16 programs on 132 SMs", "achieved occupancy 11 %"],
                       summary="a few long rows, one program each")
MATMUL = Diagnosis(bottleneck="compute", evidence=["tensor pipe 60 %", "stall long scoreboard in the K loop"],
                   summary="loads not hidden behind the math")


# -- the shipped playbook as data ---------------------------------------------------------------------------


def test_every_shipped_entry_is_complete_and_cites_its_measurement() -> None:
    bench = (ROOT / "BENCHMARKS.md").read_text()
    entries = shipped()
    assert len(entries) >= 8 and len({e.id for e in entries}) == len(entries)
    # the heading the playbook's text quotes is a section of the loop's topic (BENCHMARKS.md is ordered by topic)
    loop = _benchmarks_section(bench, "## The loop")
    for e in entries:
        section = _benchmarks_section(loop, f"### {e.section}")
        assert set(e.kinds) <= set(KINDS) | {"any"} and e.kinds, e.id
        assert set(e.bottlenecks) <= set(typing.get_args(Bottleneck)) and e.bottlenecks, e.id
        assert e.category in typing.get_args(Category), e.id
        assert e.symptom and e.move and e.effect and e.keywords == [k.lower() for k in e.keywords], e.id
        assert e.gpu == H100 and e.torch == "2.11" and e.triton == "3.6", e.id
        for source in e.sources:
            kind, _, names = source.partition(" ")
            for name in re.split(r",\s*", names):
                row = f"| {name} (" if kind == "P" else name
                assert kind in ("P", "L") and row in section, f"{e.id} cites {source!r}, which BENCHMARKS.md lacks"


def _benchmarks_section(text: str, heading: str) -> str:
    """The text under one heading of BENCHMARKS.md (the whole line, or its words before a trailing "(issue N)"
    note), up to the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    found = re.search(rf"^{re.escape(heading)}( \(.*\))?$", text, re.M)
    assert found, f"BENCHMARKS.md has no heading {heading!r}"
    rest = text[found.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[:end.start()] if end else rest


def test_no_entry_states_one_benchmark_problems_answer() -> None:
    """Patterns, not answers: no exact shape of a scored problem (KernelBench 40_LayerNorm is 16 x 64 x 256 x 256,
    4.2 M elements per row), and no problem's name with its numbers."""
    text = prompts.playbook()
    for said in ("4.2 M", "4,194,304", "4194304", "16 rows", "16 x 4", "6.4 GB", "1.650", "0.291 ms"):
        assert said not in text, said
    # what a strategist is shown names no benchmark problem at all (the data keeps its BENCHMARKS.md rows)
    shown = "\n".join(playbook_for([kind], None, H200, limit=9) for kind in KINDS)
    assert shown.count("measured on an H100") == sum(len(set(e.kinds) & set(KINDS)) for e in shipped())
    for name in ("40_LayerNorm", "23_Softmax", "4.2 M", "6.4 GB", "KernelBench", "BENCHMARKS"):
        assert name not in shown, name
    # the whole playbook, as text, still reads as before (for whoever wants every entry)
    assert len(re.findall(r"^\d+\. ", text, re.M)) == len(shipped()) and "[P starvation]" in text


# -- choosing -----------------------------------------------------------------------------------------------


def test_a_layer_norm_is_not_shown_matmul_entries() -> None:
    chosen = choose_shipped(["row_reduction"], LAYER_NORM)
    ids = [e.id for e in chosen]
    assert 0 < len(ids) <= 4 and ids[0] == "split-rows"  # the occupancy and grid words put it first
    assert all("row_reduction" in e.kinds for e in chosen)
    text = playbook_for(["row_reduction"], LAYER_NORM, H100)
    assert "split each row over many programs" in text
    for matmul_only in ("matmul-more-stages", "small-matmul-smaller-tiles", "persistent-not-free", "epilogue-fusion"):
        assert matmul_only not in text


def test_a_matmul_is_shown_matmul_entries() -> None:
    chosen = choose_shipped(["matmul"], MATMUL)
    assert chosen[0].id == "matmul-more-stages" and all("matmul" in e.kinds for e in chosen)
    text = playbook_for(["matmul"], MATMUL, H100)
    assert "split-rows" not in text and "online-stats" not in text


def test_the_limit_and_a_fused_problem() -> None:
    assert len(choose_shipped(["matmul", "row_reduction"], None, limit=3)) == 3
    assert choose_shipped(["conv"], None) == [e for e in shipped() if "conv" in e.kinds]


def test_a_gemm_with_a_reduction_after_it_is_shown_the_epilogues_entries_only_when_the_diagnosis_names_them() -> None:
    """Level2/37 (a GEMM, then a group norm): the standalone row reduction's entries (split long rows over many
    programs, fewer rows per program) filled half of the strategist's playbook, on a problem whose GEMM takes the
    time. An entry for the epilogue's kind alone needs the diagnosis to name what it answers, and comes after."""
    gemm = Diagnosis(bottleneck="latency", evidence=["grid of 1024 programs, 7.8 waves", "255 registers per thread"],
                     summary="the GEMM's K loop waits on its loads")
    fused = {e.id for e in choose_shipped(["matmul", "row_reduction"], gemm)}
    assert fused and all("matmul" in e.kinds for e in shipped() if e.id in fused)
    every = [e.id for e in choose_shipped(["matmul", "row_reduction"], gemm, limit=99)]
    lead = [e.id for e in shipped() if "matmul" in e.kinds]
    assert set(every[:len(lead)]) == set(lead)  # the GEMM's entries first, whatever the generic words matched
    assert not {"split-rows", "fewer-rows-per-program"} & {e.id for e in choose_shipped(["matmul", "row_reduction"],
                                                                                         None, limit=9)}
    softmax_after = Diagnosis(bottleneck="memory", summary="the softmax epilogue reads the row twice",
                              evidence=["a max pass, then a sum pass over the GEMM's output"])
    chosen = [e.id for e in choose_shipped(["matmul", "row_reduction"], softmax_after, limit=9)]
    assert "online-stats" in chosen
    assert all("matmul" in e.kinds for e in shipped() for i in chosen[:chosen.index("online-stats")] if e.id == i)
    # alone, the same row reduction is shown its entries as before
    assert "split-rows" in {e.id for e in choose_shipped(["row_reduction"], gemm, limit=9)}


def test_each_entry_says_the_gpu_it_was_measured_on() -> None:
    on_h200 = playbook_for(["row_reduction"], LAYER_NORM, H200)
    assert on_h200.count("measured on an H100; this run is on an H200") == 4
    on_h100 = playbook_for(["row_reduction"], LAYER_NORM, H100)
    assert "measured on an H100" in on_h100 and "this run is on" not in on_h100
    assert "this run is on the CPU" in playbook_for(["row_reduction"], LAYER_NORM, "CPU (Triton interpreter)")
    assert [gpu_short(n) for n in (H100, H200, "NVIDIA GeForce RTX 4090", "NVIDIA A100-SXM4-80GB")] == \
        ["H100", "H200", "RTX 4090", "A100-SXM4-80GB"]


def learned(run: str, step: str, kinds: list[str], key: str, speedup: float = 1.2, **kw: Any) -> Knowledge:
    return Knowledge.model_validate({
        "id": f"{run}/{step}", "date": "2026-11-26T04:40:00", "run_id": run, "step_id": step, "problem": "p",
        "kinds": kinds, "gpu": H200, "bottleneck": "memory", "evidence": ["DRAM 1.06 GB moved, 570 MB needed"],
        "category": "reduction", "key": key, "what": "w", "speedup": speedup, "noise_band": 0.02, **kw})


def test_earlier_runs_are_chosen_by_kind_and_diagnosis_with_their_provenance() -> None:
    store = [learned("r1", "g1b0", ["row_reduction"], "chunk-major", 1.34, child_ms=0.23, vs_compile=1.34,
                     fraction_of_floor=0.58),
             learned("r1", "g2b0", ["matmul"], "BLOCK_N=64", 1.5),
             learned("r2", "g1b0", ["row_reduction"], "sub-chunk-loop", 1.08, bottleneck="occupancy"),
             learned("r3", "g1b0", ["row_reduction"], "chunk-major", 1.2),  # the same move again: shown once
             learned("mine", "g1b0", ["row_reduction"], "my-own-step", 2.0)]
    got = choose_learned(["row_reduction"], LAYER_NORM, store, H200, exclude_run="mine")
    assert [k.key for k in got] == ["sub-chunk-loop", "chunk-major"]  # the bottleneck that fits first
    text = playbook_for(["row_reduction"], LAYER_NORM, H200, store, exclude_run="mine")
    assert "run r1, step g1b0, on an H200, problem p (row_reduction)" in text
    assert "chunk-major: w -> 1.34x over its parent (noise ±2.0 %), 0.23 ms, 1.34x torch.compile, 58 % of the floor" in text
    assert "BLOCK_N=64" not in text and "my-own-step" not in text
    assert "BLOCK_N=64" in playbook_for(["matmul"], MATMUL, H200, store)
    assert len(choose_learned(["row_reduction"], None, store, limit=1)) == 1


def test_only_a_gain_beyond_the_noise_band_is_kept() -> None:
    archive = Archive(entries={"p": Entry(id="p", noise_band=0.05)})

    def step(measured: float | None, decision: str = "elite") -> Step:
        return Step(step=0, parent_id="p", proposal_key="k", child_id="c", verdict="pass", reason="ok",
                    measured_speedup=measured, decision=decision, why="")  # type: ignore[arg-type]

    assert winning(step(1.06), archive, 0.02)
    assert not winning(step(1.04), archive, 0.02)  # inside the parent's band, the wider one
    assert not winning(step(1.5, "niche"), archive, 0.02) and not winning(step(None, "unmeasured"), archive, 0.0)


# -- memory across runs, through the real graph ----------------------------------------------------------------

MARK = '"""o = x + y, four elements per lane (the winning move)"""'
WIN = {"category": "memory_access", "what": "load four contiguous elements per lane", "why": "fewer, wider loads",
       "predicted_speedup": 1.2, "risk": "low", "key": "vector-loads-4"}


def timed(ms: float, gpu: str) -> EvalResult:
    t = Timing(median_ms=ms, p25_ms=ms, p75_ms=ms, min_ms=ms, max_ms=ms, reps=30, wall_median_ms=ms, noise_band=0.02,
               eager_ms=2.0, speedup_vs_eager=2.0 / ms, vs_eager="faster", compile_ms=1.0, speedup_vs_compile=1.0 / ms,
               floor_ms=0.4, fraction_of_floor=0.4 / ms, bound="memory", best_baseline_ms=1.0,
               best_baseline="torch.compile")
    return EvalResult(verdict="pass", reason="ok", detail="fake: verified and timed", device="cuda:0", timing=t,
                      families=["base", "test_inputs"], versions={"gpu": gpu, "torch": "2.11", "triton": "3.6"})


class GpuEvaluator:
    """Answers as an evaluator on `gpu` does: verified and timed, the seed 1 ms and the winning move 0.8 ms."""

    def __init__(self, gpu: str) -> None:
        self.gpu = gpu

    def evaluate(self, source: str, quick: bool = False) -> EvalResult:
        if quick:
            return EvalResult(verdict="pass", reason="ok", detail="fake quick check", device="cuda:0",
                              families=["base", "test_inputs"])
        return timed(0.8 if MARK in source else 1.0, self.gpu)

    def device_facts(self) -> DeviceFacts:
        return DeviceFacts(device="cuda:0", name=self.gpu, timed=True, admission="fake")

    def close(self) -> None:
        pass


def one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, problem: Path, gpu: str, **config: Any
            ) -> tuple[Run, str, StepRecord]:
    """One step of the real graph on `problem`, as on `gpu`: the scripted model proposes the winning move. Returns
    the run, its strategist's prompt and its step."""
    monkeypatch.setattr(Evaluations, "evaluator", lambda self, device: GpuEvaluator(gpu))
    run = RunStore(tmp_path / "runs").create(str(problem), problem.read_text(), {})
    cfg = RunConfig(model="scripted:k", device="cuda:0", profile="off", trials=1, branches=1, iterations=1,
                    roofline_target=None, **config)
    run.update(config={"seed_kernel": run.put_kernel(SEED), "settings": cfg.as_dict()})
    model = Scripted(script=[call("Diagnosis", DIAGNOSIS, 0), call("Proposal", WIN, 1),
                             call("write_kernel", {"source": SEED.replace('"""o = x + y"""', MARK)}, 2),
                             call("finish", {}, 3)])
    ctx = RunContext.open(cfg, run, models={"scripted:k": model})
    try:
        list(builder().compile(checkpointer=InMemorySaver()).stream(initial_state(), {"configurable": {"thread_id": "k"}},
                                                                   context=ctx, stream_mode="updates"))
    finally:
        ctx.close()
    (strategist,) = [m[0].content for m in model.seen if "You are the strategist" in str(m[0].content)]
    (record,) = [StepRecord.model_validate(r) for r in run.trace()]
    return run, str(strategist), record


def test_a_second_run_on_a_similar_problem_is_shown_the_first_runs_winning_move(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the default store, under the user's data folder
    store = KnowledgeStore()
    assert store.path == tmp_path / "data" / "kernelwright" / "knowledge.jsonl" and not store.path.exists()

    first, prompt1, rec1 = one_run(tmp_path, monkeypatch, ADD, H100)
    assert rec1.decision.decision == "elite" and rec1.decision.measured_speedup == pytest.approx(1.25)
    assert "vector-loads-4" not in prompt1.split("## What is known to work here")[1]  # nothing learned yet
    (k,) = store.entries()
    assert (k.id, k.run_id, k.step_id, k.key, k.category, k.gpu) == \
        (f"{first.id}/g1b0", first.id, "g1b0", "vector-loads-4", "memory_access", H100)
    assert k.kinds == ["elementwise"] and k.problem == "add_problem" and k.bottleneck == "memory"
    assert k.speedup == pytest.approx(1.25) and k.noise_band == 0.02 and k.child_ms == 0.8
    assert k.vs_compile == pytest.approx(1.25) and k.fraction_of_floor == pytest.approx(0.5)
    assert k.versions == {"torch": "2.11", "triton": "3.6"} and k.policy == "scripted:k"

    # a similar problem (elementwise too), on another GPU
    mul = tmp_path / "mul_problem.py"
    mul.write_text(ADD.read_text().replace("return x + y", "return x * y"))
    second, prompt2, _ = one_run(tmp_path, monkeypatch, mul, H200)
    shown = prompt2.split("## What is known to work here")[1]
    assert f"run {first.id}, step g1b0, on an H100; this run is on an H200, problem add_problem (elementwise)" in shown
    assert "memory_access vector-loads-4: load four contiguous elements per lane -> 1.25x over its parent " \
           "(noise ±2.0 %), 0.8 ms, 1.25x torch.compile, 50 % of the floor" in shown
    assert [e.run_id for e in store.entries()] == [first.id, second.id]  # the second run's win is kept too


def test_a_run_without_knowledge_neither_reads_nor_writes_the_store(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "k.jsonl"
    first, _, _ = one_run(tmp_path, monkeypatch, ADD, H100, knowledge=str(path))
    before = path.read_bytes()
    assert len(before.splitlines()) == 1
    _, prompt, rec = one_run(tmp_path, monkeypatch, ADD, H100, knowledge=str(path), use_knowledge=False)
    assert rec.decision.decision == "elite"  # a win, and still not kept
    assert path.read_bytes() == before
    assert "vector-loads-4" not in prompt.split("## What is known to work here")[1] and first.id not in prompt
    # the shipped playbook is still there, chosen for the problem's kind
    assert "large-blocks-then-structure" in prompt


def test_an_entry_whose_conditions_do_not_hold_is_not_shown() -> None:
    """Level1/35_GroupNorm_ (issue 23's repeat on an H100): a strategist was offered a softmax's one-pass statistics
    and the split of starved rows for a grid of 918k programs. `online-stats` needs a reference that names a softmax
    or log-sum-exp; `split-rows` a parent whose largest launch has at most one program per SM."""
    group_norm = "class Model(nn.Module):\n    def forward(self, x):\n        return self.gn(x)\n"
    softmax = "class Model(nn.Module):\n    def forward(self, x):\n        return torch.softmax(x, dim=1)\n"
    memory = Diagnosis(bottleneck="memory", summary="both kernels near DRAM peak; the design reads x twice",
                       evidence=["dram throughput 3.0 TB/s", "grid of 918000 programs", "occupancy 50 %"])
    gn = [e.id for e in choose_shipped(["row_reduction"], memory, 9, source=group_norm, programs=918_000, sms=132)]
    assert "online-stats" not in gn and "split-rows" not in gn and gn, gn
    starved = [e.id for e in choose_shipped(["row_reduction"], LAYER_NORM, 9, source=group_norm, programs=16, sms=132)]
    assert starved[0] == "split-rows"
    sm = [e.id for e in choose_shipped(["row_reduction"], memory, 9, source=softmax, programs=918_000, sms=132)]
    assert "online-stats" in sm and "split-rows" not in sm
    # nothing known (the CPU: no grid, no SM count; a caller without the source): nothing excluded
    assert {"online-stats", "split-rows"} <= {e.id for e in choose_shipped(["row_reduction"], memory, 9)}
    text = playbook_for(["row_reduction"], memory, H100, source=group_norm, programs=918_000, sms=132)
    assert "[split-rows]" not in text and "[online-stats]" not in text
    # a persistent parent (one program per SM striding over 32768 rows: an L2 norm on an H200) is not starved
    persistent = ("@triton.jit\ndef k(x, M):\n    pid = tl.program_id(0)\n    nprog = tl.num_programs(0)\n"
                  "    for row in range(pid, M, nprog):\n        pass\n")
    grid_stride = [e.id for e in choose_shipped(["row_reduction"], LAYER_NORM, 9, source=group_norm, programs=132,
                                                sms=132, parent_source=persistent)]
    assert "split-rows" not in grid_stride and grid_stride, grid_stride
    one_row_each = persistent.replace("nprog = tl.num_programs(0)", "nprog = 1").replace(", nprog)", ", 1)")
    assert choose_shipped(["row_reduction"], LAYER_NORM, 9, source=group_norm, programs=132, sms=132,
                          parent_source=one_row_each)[0].id == "split-rows"


def test_a_persistent_kernel_is_told_from_a_grid_that_reads_its_own_size() -> None:
    """`playbook.persistent`: a grid-stride loop (from the program's id, by a step that is no number) or a ticket
    is persistent; a 2-D split that reads `tl.num_programs(1)` for its layout, or atomics that add partial sums,
    are not (the builtin's seeds for KernelBench's softmax and layer norm)."""
    from kernelwright.agents.playbook import persistent

    assert persistent("pid = tl.program_id(0)\nfor r in tl.range(pid, M, NUM_SMS):\n    pass\n")
    assert persistent("for r in range(tl.program_id(0), M, tl.num_programs(0)):\n    pass\n")
    assert persistent("t = tl.atomic_add(counter, 1)\n")
    assert not persistent("pid = tl.program_id(0)\nfor c in range(pid, N, 4):\n    pass\n")
    assert not persistent("tl.atomic_add(out + r, partial)\nn = tl.num_programs(1)\n")
    assert not persistent("def broken(:\n")
    for seed in ("kb_23_Softmax_seed.py", "kb_40_LayerNorm_seed.py"):
        source = (Path(__file__).resolve().parents[2] / "bench" / "seeds" / seed).read_text()
        assert "tl.num_programs(" in source and not persistent(source), seed
