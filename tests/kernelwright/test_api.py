"""The Python API: evaluate, start/resume a run and iterate over its steps, stop it, read it back. Two
runs in one process keep their own prices, budgets, models and stop requests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernelwright import api
from kernelwright.agents.records import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"
sys.path.insert(0, str(ROOT / "tests" / "agents"))
from scripted import DIAGNOSIS, PROPOSAL, Scripted, call  # noqa: E402


def _steps(n: int, tag: str) -> list:
    msgs = []
    for i in range(n):
        msgs += [call("Diagnosis", DIAGNOSIS, 5 * i), call("Proposal", {**PROPOSAL, "key": f"{tag}{i}"}, 5 * i + 1),
                 call("write_kernel", {"source": SEED.read_text() + f"\n# {tag} {i}\n"}, 5 * i + 2),
                 call("quick_check", {}, 5 * i + 3), call("finish", {}, 5 * i + 4)]
    return msgs


def _config(model: str, **kw: object) -> api.RunConfig:
    # plateau and roofline stops off: on the CPU nothing is timed, so only the budgets may end these runs
    return api.RunConfig(model=model, device="cpu", trials=1, branches=1, iterations=6, plateau_steps=10 ** 6,
                         roofline_target=None, **kw)  # type: ignore[arg-type]


@pytest.mark.timeout(600)
def test_two_runs_in_one_process_stop_on_their_own_cost_budgets(tmp_path: Path) -> None:
    # a step is 5 calls of 100 input + 10 output tokens: $1.00 a step at 1000/10000 USD per million, $0.50 at
    # 500/5000; the same model name, priced differently by each run
    a = api.start_run(PROBLEM, seed_kernel=SEED, runs_dir=tmp_path,
                      config=_config("scripted:m", cost_budget_usd=1.5, prices={"scripted:m": [1000, 10000]}),
                      models={"scripted:m": Scripted(script=_steps(6, "a"))})
    b = api.start_run(PROBLEM, seed_kernel=SEED, runs_dir=tmp_path,
                      config=_config("scripted:m", cost_budget_usd=1.2, prices={"scripted:m": [500, 5000]}),
                      models={"scripted:m": Scripted(script=_steps(6, "b"))})
    with a, b:
        steps_a, steps_b = a.steps(), b.steps()
        seen: dict[str, list[api.StepRecord]] = {"a": [], "b": []}
        live = {"a": steps_a, "b": steps_b}
        while live:  # interleaved, one step of each in turn: nothing may leak from one to the other
            for name, it in list(live.items()):
                try:
                    seen[name].append(next(it))
                except StopIteration:
                    del live[name]
    ia, ib = a.info(), b.info()
    assert ia.stop_reason == "cost budget reached ($2.0000 of $1.5000)" and ia.steps == 2
    assert ib.stop_reason == "cost budget reached ($1.5000 of $1.2000)" and ib.steps == 3
    assert [s.cost_usd for s in seen["a"]] == [pytest.approx(1.0)] * 2
    assert [s.cost_usd for s in seen["b"]] == [pytest.approx(0.5)] * 3
    assert [s.proposal.key for s in seen["b"] if s.proposal] == ["b0", "b1", "b2"]  # b's model, not a's
    assert all(s.llm["coder"].cost_usd == pytest.approx(0.6) for s in seen["a"])


@pytest.mark.timeout(600)
def test_a_stop_request_stops_only_its_own_run(tmp_path: Path) -> None:
    cfg = api.RunConfig(device="cpu", trials=1, branches=1, iterations=3)
    with api.start_run(PROBLEM, seed_kernel=SEED, config=cfg, runs_dir=tmp_path) as a, \
            api.start_run(PROBLEM, seed_kernel=SEED, config=cfg, runs_dir=tmp_path) as b:
        a.request_stop()
        assert len(list(a.steps())) == 1  # the generation in flight is finished, then it stops
        assert len(list(b.steps())) == 3
    assert a.info().stop_reason.startswith("stopped on request") and a.info().status == "stopped"
    assert a.info().resumable
    assert b.info().stop_reason == "iteration budget reached (3 steps)"
    # a stopped run resumes where it stopped, with its saved config
    with api.resume_run(a.id, runs_dir=tmp_path) as again:
        more = list(again.steps())
    assert [s.step_id for s in more] == ["g2b0", "g3b0"] and again.info().steps == 3


@pytest.mark.timeout(600)
def test_a_finished_run_reads_back(tmp_path: Path) -> None:
    cfg = api.RunConfig(device="cpu", trials=1, branches=2, iterations=2)
    with api.start_run(PROBLEM, seed_kernel=SEED, config=cfg, runs_dir=tmp_path) as handle:
        info = handle.run_to_end()
    view = api.open_run(info.id, tmp_path)
    steps = view.steps()
    assert [s.step_id for s in steps] == ["g1b0", "g1b1"]
    assert all(s.schema_version == SCHEMA_VERSION == 4 and s.verdict == "pass" and s.result and s.result.verdict == "pass"
               for s in steps)
    archive = view.archive()
    assert archive is not None and len(archive.steps) == 2 and archive.best is not None
    best = view.best()
    assert best is not None and best.hash == info.best_kernel and "ModelNew" in best.source
    assert best.result is not None and best.result.passed
    assert [i.id for i in api.list_runs(tmp_path)] == [info.id]
    with pytest.raises(api.UsageError, match="no run"):
        api.open_run("nope", tmp_path)


def test_evaluate_a_candidate(tmp_path: Path) -> None:
    r = api.evaluate(PROBLEM, SEED, device="cpu", trials=1)
    assert r.passed and r.timing is None and r.timing_unavailable
    wrong = SEED.read_text().replace("mask=m) + tl.load", "mask=m) - tl.load")
    r = api.evaluate(PROBLEM, wrong, device="cpu", trials=1)  # source text works as well as a path
    assert r.verdict == "fail" and r.reason == "wrong_output"
    with pytest.raises(api.UsageError, match="no such candidate"):
        api.evaluate(PROBLEM, tmp_path / "missing.py", device="cpu")
    bad = tmp_path / "bad_problem.py"
    bad.write_text("x = 1\n")
    with pytest.raises(api.UsageError):
        api.evaluate(bad, SEED, device="cpu")


def test_bad_configs_are_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(api.UsageError, match="needs the price of scripted:m"):
        api.start_run(PROBLEM, seed_kernel=SEED, runs_dir=tmp_path, models={"scripted:m": Scripted()},
                      config=api.RunConfig(model="scripted:m", cost_budget_usd=1.0))
    with pytest.raises(api.UsageError, match="seed_kernel"):
        api.start_run(PROBLEM, runs_dir=tmp_path)
    assert not list(tmp_path.iterdir())  # nothing was created for a refused run
