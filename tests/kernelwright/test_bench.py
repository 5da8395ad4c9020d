"""`kernelwright bench`: a small suite in KernelBench's layout judged on the CPU (an honest kernel, a wrong one,
a cheating one, one missing; a level filtered out) and resumed; `--optimize` running the loop per problem
from seed kernels; the fast_p arithmetic with KernelBench's definitions on timed rows; one-sentence errors."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelwright.bench_command import BenchRow, figures_markdown, summarize
from kernelwright.cli import app

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kb_suite import HONEST, ROOT, write_suite  # noqa: E402


@pytest.fixture()
def suite(tmp_path: Path) -> tuple[Path, Path]:
    return write_suite(tmp_path, {"level2/1_ReLU.py": (HONEST / "relu_problem.py", HONEST / "relu_candidate.py")},
                       kernel_names={"level1/1_ReLU.py": "level1/1_ReLU_triton.py"})  # both namings


@pytest.mark.timeout(600)
def test_a_suite_on_the_cpu_gives_kernelbench_figures_and_resumes(suite: tuple[Path, Path], tmp_path: Path) -> None:
    s, k = suite
    out = tmp_path / "out"
    runner = CliRunner()
    args = ["bench", str(s), "--kernels", str(k), "--device", "cpu", "--trials", "1", "--levels", "1", "--out", str(out)]
    r = runner.invoke(app, [*args, "--problems", "1_*"])  # the first problem only, then the rest by --resume
    assert r.exit_code == 0, r.output
    first = (out / "results.jsonl").read_text()
    assert len(first.splitlines()) == 1
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "--resume" in r.output  # an existing results file is not overwritten
    r = runner.invoke(app, [*args, "--resume"])
    assert r.exit_code == 0, r.output
    text = (out / "results.jsonl").read_text()
    assert text.startswith(first)  # the first row was not judged again
    rows = {json.loads(x)["problem"]: json.loads(x) for x in text.splitlines()}
    assert set(rows) == {"level1/1_ReLU.py", "level1/2_ReLU_signs.py", "level1/3_Softmax.py", "level1/4_RowSum.py"}
    assert (rows["level1/1_ReLU.py"]["verdict"], rows["level1/1_ReLU.py"]["reason"]) == ("pass", "ok")
    assert (rows["level1/2_ReLU_signs.py"]["verdict"], rows["level1/2_ReLU_signs.py"]["reason"]) == ("fail", "wrong_output")
    assert (rows["level1/3_Softmax.py"]["verdict"], rows["level1/3_Softmax.py"]["reason"]) == ("fail", "forbidden_op")
    assert rows["level1/4_RowSum.py"]["verdict"] == "missing"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["problems"] == 4 and summary["correct"] == 1 and summary["missing"] == 1 and summary["timed"] == 0
    # on the CPU nothing is timed: fast_0 is the share correct, every faster-than figure is 0
    assert summary["fast_p"]["eager"] == {"0": 0.25, "0.5": 0.0, "0.8": 0.0, "1": 0.0, "1.5": 0.0, "2": 0.0}
    assert summary["geomean_speedup"] == {"eager": None, "compile": None}
    md = (out / "summary.md").read_text()
    assert "strict >" in md and "| level1/3_Softmax.py | fail | forbidden_op |" in md
    page = (out / "summary.html").read_text()
    assert "<svg" in page and "default-src 'none'" in page and "http" not in page.replace("http-equiv", "")


def test_fast_p_with_kernelbench_definitions() -> None:
    def row(name: str, verdict: str = "pass", eager: float | None = None, comp: float | None = None,
            suspect: list[str] | None = None, floor: float | None = None) -> BenchRow:
        return BenchRow(problem=name, level=1, verdict=verdict, reason="ok" if verdict == "pass" else verdict,
                        speedup_vs_eager=eager, speedup_vs_compile=comp, suspect=suspect or [],
                        fraction_of_floor=floor)

    rows = [row("a", eager=2.5, comp=1.2, floor=0.8), row("b", eager=1.0, comp=0.5, floor=0.4),
            row("c", eager=0.9, comp=0.45, floor=0.2),
            row("d", eager=30.0, comp=10.0, suspect=["more than 10x faster than eager"]),
            row("e", verdict="fail", eager=5.0, comp=5.0), row("f", verdict="missing"),
            row("g")]  # correct, not timed
    s = summarize(rows, 8)  # one selected problem has no row at all: it counts as incorrect
    assert s.fast_p["eager"] == {"0": 5 / 8, "0.5": 3 / 8, "0.8": 3 / 8, "1": 1 / 8, "1.5": 1 / 8, "2": 1 / 8}
    assert s.fast_p["compile"] == {"0": 5 / 8, "0.5": 1 / 8, "0.8": 1 / 8, "1": 1 / 8, "1.5": 0.0, "2": 0.0}
    assert s.geomean_speedup["eager"] == pytest.approx((2.5 * 1.0 * 0.9) ** (1 / 3))
    assert s.mean_fraction_of_floor == pytest.approx((0.8 + 0.4 + 0.2) / 3)
    assert (s.correct, s.timed, s.missing, s.judged) == (5, 3, 1, 6)
    assert s.gpus == {} and "Judged on" not in figures_markdown(s)  # the CPU, or rows without a GPU


def test_a_summary_over_several_gpu_models_says_so() -> None:
    rows = [BenchRow(problem=f"p{i}", level=1, verdict="pass", reason="ok", speedup_vs_eager=2.0, gpu=g)
            for i, g in enumerate(["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"])]
    one = summarize(rows[:2], 2)
    assert one.gpus == {"NVIDIA H100 80GB HBM3": 2}
    assert "Judged on: NVIDIA H100 80GB HBM3 (2)." in figures_markdown(one) and "mix" not in figures_markdown(one)
    mixed = figures_markdown(summarize(rows, 3))
    assert "Judged on 2 GPU models" in mixed and "NVIDIA A100-SXM4-80GB (1)" in mixed and "mix hardware" in mixed


def test_bad_input_is_one_sentence(tmp_path: Path, suite: tuple[Path, Path]) -> None:
    s, k = suite
    runner = CliRunner()
    for args, words in ((["bench", str(tmp_path / "nope"), "--kernels", str(k)], "no such suite folder"),
                        (["bench", str(s), "--kernels", str(tmp_path / "nope"), "--device", "cpu",
                          "--out", str(tmp_path / "o1")], "no such kernels folder"),
                        (["bench", str(s), "--kernels", str(k), "--levels", "one"], "--levels takes numbers"),
                        (["bench", str(s), "--kernels", str(k), "--problems", "zzz*"], "no problem files match"),
                        (["bench", str(s), "--kernels", str(k), "--device", "cuda:7", "--out", str(tmp_path / "o2")],
                         "cuda"),
                        (["bench", str(s), "--kernels", str(k), "--device", "cpu,cpu", "--out", str(tmp_path / "o3")],
                         "named twice"),
                        (["bench", str(s), "--out", str(tmp_path / "o4")], "give --kernels DIR"),
                        (["bench", str(s), "--kernels", str(k), "--optimize", "--out", str(tmp_path / "o5")],
                         "one of them"),
                        (["bench", str(s), "--kernels", str(k), "--seed-kernels", str(k)], "goes with --optimize"),
                        (["bench", str(s), "--optimize", "--model", "nonsense", "--out", str(tmp_path / "o6")],
                         "--model 'nonsense'")):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output, (args, r.output)


@pytest.mark.timeout(600)
def test_optimize_runs_the_loop_per_problem_from_seed_kernels(suite: tuple[Path, Path], tmp_path: Path) -> None:
    s, k = suite
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["bench", str(s), "--optimize", "--seed-kernels", str(k), "--levels", "1",
                                 "--problems", "1_*,4_*", "--iterations", "2", "--branches", "1", "--device", "cpu",
                                 "--trials", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = {json.loads(x)["problem"]: json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()}
    relu, rowsum = rows["level1/1_ReLU.py"], rows["level1/4_RowSum.py"]
    # the seed was verified and the run took its steps; the best kernel is one of the run's own
    run_dir = out / "runs" / relu["run"]
    assert relu["verdict"] == "pass" and Path(relu["kernel"]).parent == run_dir / "kernels"
    assert len((run_dir / "trace.jsonl").read_text().splitlines()) == 2
    assert rowsum["verdict"] == "missing" and "builtin policy cannot write one" in rowsum["detail"]
    assert json.loads((out / "summary.json").read_text())["fast_p"]["eager"]["0"] == 0.5


def test_a_device_list_keeps_every_device_busy_and_never_two_problems_on_one(
        suite: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    from kernelwright import bench_command as bench

    spans: list[tuple[str, float, float]] = []
    lock = threading.Lock()

    def fake_judge(level: int, problem: Path, kernel: Path | None, *, device: str, **kw: object) -> BenchRow:
        t0 = time.monotonic()
        time.sleep(0.3)
        with lock:
            spans.append((device, t0, time.monotonic()))
        return BenchRow(problem=f"level{level}/{problem.name}", level=level, verdict="pass", reason="ok",
                        device=device)

    monkeypatch.setattr(bench, "check_devices", lambda device: ["gpu:a", "gpu:b"])
    monkeypatch.setattr(bench, "judge", fake_judge)
    s, k = suite
    t0 = time.monotonic()
    rows = list(bench.run_bench(s, tmp_path / "out", kernels=k, device="gpu:a,gpu:b"))
    wall = time.monotonic() - t0
    assert sorted(r.problem for r in rows) == sorted(json.loads(x)["problem"] for x in
                                                      (tmp_path / "out" / "results.jsonl").read_text().splitlines())
    assert len(rows) == 5 and {d for d, _, _ in spans} == {"gpu:a", "gpu:b"}
    for dev in ("gpu:a", "gpu:b"):  # one problem at a time per device
        mine = sorted((a, b) for d, a, b in spans if d == dev)
        assert all(b1 <= a2 for (_, b1), (a2, _) in zip(mine, mine[1:]))
    assert wall < 5 * 0.3  # in parallel: 3 rounds of 0.3 s, not 5


@pytest.mark.timeout(300)
def test_optimize_with_a_model_and_no_seed_kernels_starts_from_scratch(tmp_path: Path) -> None:
    """`--optimize` with a model and no `--seed-kernels`: the coder's model writes the first kernel of each
    problem's run, and the loop goes on from it (a scripted model, on the CPU)."""
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "agents"))
    from scripted import DIAGNOSIS, PROPOSAL, Scripted, call

    from kernelwright.api import RunConfig
    from kernelwright.bench_command import run_bench

    graphs = ROOT / "tests" / "graphs"
    seed = (graphs / "add_seed.py").read_text()
    (tmp_path / "suite" / "level1").mkdir(parents=True)
    shutil.copy(graphs / "add_problem.py", tmp_path / "suite" / "level1" / "1_Add.py")
    model = Scripted(script=[
        call("write_kernel", {"source": seed}, 0),
        call("finish", {}, 1),
        call("Diagnosis", DIAGNOSIS, 2),
        call("Proposal", PROPOSAL | {"what": "NUM_WARPS 4 -> 8", "key": "NUM_WARPS=8", "category": "warps"}, 3),
        call("search_replace", {"old": "NUM_WARPS = 4", "new": "NUM_WARPS = 8"}, 4),
        call("finish", {}, 5),
    ])
    config = RunConfig(model="scripted:writer", iterations=1, branches=1, trials=1)
    rows = list(run_bench(tmp_path / "suite", tmp_path / "out", optimize_config=config, device="cpu",
                          models={"scripted:writer": model}))
    assert [(r.problem, r.verdict) for r in rows] == [("level1/1_Add.py", "pass")] and not model.script
    run_dir = tmp_path / "out" / "runs" / str(rows[0].run)
    info = json.loads((run_dir / "run.json").read_text())
    assert info["config"]["seed_kernel"] and info["config"]["seed_path"] is None  # written by the model
    (step,) = [json.loads(x) for x in (run_dir / "trace.jsonl").read_text().splitlines()]
    assert step["verdict"] == "pass" and "+NUM_WARPS = 8" in step["coder"]["diff"]
