"""`kernelwright knowledge list|show|export|clear` and optimize's and chat's `--knowledge PATH` / `--no-knowledge`
(issue 23, item 3): each error one sentence and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kernelwright import cli
from kernelwright.tools.knowledge import Knowledge, KnowledgeStore

REPO = Path(__file__).resolve().parents[2]
PROBLEM = REPO / "tests" / "graphs" / "add_problem.py"
SEED = REPO / "tests" / "graphs" / "add_seed.py"


def entry(step: str, key: str = "split-row-64") -> Knowledge:
    return Knowledge(id=f"20261126-043312-a1b2c3/{step}", date="2026-11-26T04:40:00", run_id="20261126-043312-a1b2c3",
                     step_id=step, problem="40_LayerNorm", kinds=["row_reduction"], gpu="NVIDIA H200",
                     versions={"torch": "2.11"}, bottleneck="memory", evidence=["L2 hit 26 %"], category="reduction",
                     key=key, what="split each row over 64 programs", speedup=1.26, noise_band=0.02, child_ms=0.23,
                     policy="openai:m")


def invoke(*args: str | Path) -> Any:
    return CliRunner().invoke(cli.app, [str(a) for a in args])


def one_sentence(r: Any) -> str:
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit))
    (line,) = [x for x in r.output.splitlines() if x.startswith("error: ")]
    return line.removeprefix("error: ")


@pytest.fixture
def store(tmp_path: Path) -> KnowledgeStore:
    s = KnowledgeStore(tmp_path / "k.jsonl")
    s.append(entry("g1b0"))
    s.append(entry("g2b0", "chunk-major"))
    return s


def test_list_and_show(store: KnowledgeStore) -> None:
    r = invoke("knowledge", "list", "--knowledge", store.path)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert len(lines) == 2 and lines[0].startswith("20261126-043312-a1b2c3/g1b0  2026-11-26T04:40:00  40_LayerNorm")
    assert "reduction split-row-64  1.260x (noise ±2.0%)" in lines[0] and "chunk-major" in lines[1]
    r = invoke("knowledge", "list", "--knowledge", store.path, "--json")
    assert [json.loads(x)["key"] for x in r.output.splitlines()] == ["split-row-64", "chunk-major"]
    r = invoke("knowledge", "show", "20261126-043312-a1b2c3/g2", "--knowledge", store.path)  # a unique prefix
    assert r.exit_code == 0, r.output
    assert "run 20261126-043312-a1b2c3, step g2b0, on an H200" in r.output and "evidence: L2 hit 26 %" in r.output
    assert "move: reduction chunk-major: split each row over 64 programs" in r.output


def test_show_names_what_is_wrong(store: KnowledgeStore) -> None:
    assert one_sentence(invoke("knowledge", "show", "nope", "--knowledge", store.path)) == \
        f"no entry nope in the knowledge store ({store.path}): see kernelwright knowledge list"
    assert one_sentence(invoke("knowledge", "show", "20261126", "--knowledge", store.path)).startswith(
        "20261126 names 2 entries of the knowledge store")


def test_the_default_store_and_an_empty_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    r = invoke("knowledge", "list")
    assert r.exit_code == 0 and "is empty: runs add their winning steps to it" in r.output
    assert str(tmp_path / "data" / "kernelwright" / "knowledge.jsonl") in r.output
    assert one_sentence(invoke("knowledge", "list", "--knowledge", tmp_path)).endswith(
        "is a folder: give the knowledge store's file")


def test_export_to_a_file_or_stdout(store: KnowledgeStore, tmp_path: Path) -> None:
    r = invoke("knowledge", "export", "--knowledge", store.path)
    assert r.exit_code == 0 and [json.loads(x)["step_id"] for x in r.output.splitlines() if x.startswith("{")] == \
        ["g1b0", "g2b0"]
    out = tmp_path / "out.jsonl"
    r = invoke("knowledge", "export", out, "--knowledge", store.path)
    assert r.exit_code == 0 and [Knowledge.model_validate_json(x).key for x in out.read_text().splitlines()] == \
        ["split-row-64", "chunk-major"]
    assert one_sentence(invoke("knowledge", "export", tmp_path, "--knowledge", store.path)) == \
        f"{tmp_path} is a folder: give a file name"


def test_clear_asks_for_yes(store: KnowledgeStore) -> None:
    said = one_sentence(invoke("knowledge", "clear", "--knowledge", store.path))
    assert said == f"clearing removes 2 entries from {store.path}: add --yes (nothing was cleared)"
    assert len(store.entries()) == 2
    r = invoke("knowledge", "clear", "--yes", "--knowledge", store.path)
    assert r.exit_code == 0 and "cleared 2 entries" in r.output and store.entries() == []
    r = invoke("knowledge", "clear", "--yes", "--knowledge", store.path)
    assert r.exit_code == 0 and "empty already" in r.output


def test_optimize_takes_the_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelwright import optimize_command as opt

    monkeypatch.setattr(cli, "_confinement", lambda *a, **k: True)
    seen: dict[str, Any] = {}

    def fake(**kw: Any) -> Any:
        seen.update(kw)
        raise opt.UsageError("stopped by the test")

    monkeypatch.setattr(opt, "run_optimize", fake)
    base = ["optimize", PROBLEM, "--seed-kernel", SEED, "--device", "cpu", "--run-dir", tmp_path / "runs"]
    assert one_sentence(invoke(*base, "--knowledge", tmp_path / "k.jsonl")) == "stopped by the test"
    assert seen["config"].knowledge == str(tmp_path / "k.jsonl") and seen["config"].use_knowledge is True
    invoke(*base, "--no-knowledge")
    assert seen["config"].knowledge is None and seen["config"].use_knowledge is False
    invoke(*base)
    assert seen["config"].knowledge is None and seen["config"].use_knowledge is True
    # the flags become the run's config: contradicting ones are one sentence, in the flags' words
    assert one_sentence(invoke(*base, "--knowledge", "k.jsonl", "--no-knowledge")) == \
        "--knowledge and --no-knowledge contradict each other: give one"
    with pytest.raises(opt.UsageError, match="^knowledge and use_knowledge contradict each other: give one$"):
        cli.settings_config("optimize", dict(model="builtin", iterations=1, branches=1, device="cpu", trials=1,
                                             profile="off", knowledge="k.jsonl", use_knowledge=False))
    cfg = cli.settings_config("optimize", dict(model="builtin", iterations=1, branches=1, device="cpu", trials=1,
                                               profile="off", knowledge=str(tmp_path / "k.jsonl")))
    assert cfg.knowledge == str(tmp_path / "k.jsonl") and cfg.use_knowledge


def test_chat_takes_the_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelwright import api
    from kernelwright import chat as chat_mod

    seen: dict[str, Any] = {}

    def fake_chat(*, start: Any, **kw: Any) -> int:
        with start() as handle:
            seen["knowledge"], seen["use"] = handle.config.knowledge, handle.config.use_knowledge
        return 0

    monkeypatch.setattr(chat_mod, "run_chat", fake_chat)
    monkeypatch.setattr(cli, "_confinement", lambda *a, **k: True)
    monkeypatch.setattr(api, "check_confinement", lambda *a, **k: None)
    r = invoke("chat", PROBLEM, "--seed-kernel", SEED, "--device", "cpu", "--hosts", "off", "--no-knowledge",
               "--run-dir", tmp_path / "runs")
    assert r.exit_code == 0, r.output
    assert seen == {"knowledge": None, "use": False}


def test_import_what_another_machine_learned(store: KnowledgeStore, tmp_path: Path) -> None:
    """A GPU host is given back with its disk: its store, exported, is imported here (new ids only, so importing
    twice adds nothing); a file with no entry, a missing file or a folder is one sentence and a non-zero exit."""
    there = KnowledgeStore(tmp_path / "host.jsonl")
    there.append(entry("g1b0"))  # the same step this store holds already
    there.append(entry("g3b0", "lag-margin-half"))
    exported = tmp_path / "host-export.jsonl"
    there.export(exported)
    exported.write_text(exported.read_text() + "not json\n")
    r = invoke("knowledge", "import", exported, "--knowledge", store.path)
    assert r.exit_code == 0, r.output
    assert r.output.strip() == (f"imported 1 entries from {exported} into {store.path}; 1 were there already; 1 line(s) "
                                "are not entries and were skipped (first: line 3)")
    assert [e.key for e in store.entries()] == ["split-row-64", "chunk-major", "lag-margin-half"]
    r = invoke("knowledge", "import", exported, "--knowledge", store.path)  # again: nothing new
    assert r.exit_code == 0 and r.output.startswith("imported 0 entries") and len(store.entries()) == 3
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    assert one_sentence(invoke("knowledge", "import", junk, "--knowledge", store.path)) == \
        f"{junk} holds no knowledge entry (line 1 is not one): nothing was imported"
    assert one_sentence(invoke("knowledge", "import", tmp_path / "missing.jsonl", "--knowledge", store.path)) \
        .startswith(f"cannot read {tmp_path / 'missing.jsonl'}: ")
    said = one_sentence(invoke("knowledge", "import", tmp_path, "--knowledge", store.path))
    assert said == f"{tmp_path} is a folder: give the file `kernelwright knowledge export` wrote"


def _one_run() -> Any:
    """The real graph's one winning step with a scripted model, as on a GPU (tests/agents/test_playbook.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("playbook_runs", REPO / "tests" / "agents" / "test_playbook.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.one_run


def test_learn_a_runs_winning_steps_as_the_run_would_have(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run made with --no-knowledge (or on a GPU host given back) kept nothing: `learn` reads its records and adds
    the entry the run would have added (every field but the date, which is the step's), once."""
    one_run = _one_run()
    kept, learned = tmp_path / "kept.jsonl", tmp_path / "learned.jsonl"
    with_store, _, _ = one_run(tmp_path, monkeypatch, PROBLEM, "NVIDIA H100 80GB HBM3", knowledge=str(kept))
    without, _, rec = one_run(tmp_path, monkeypatch, PROBLEM, "NVIDIA H100 80GB HBM3", knowledge=str(learned),
                              use_knowledge=False)
    assert not learned.exists()
    # a second step that lost (the archive rejected it): not learned, and counted
    lost = rec.model_dump(mode="json")
    lost.update(step_id="g2b0", decision={**lost["decision"], "decision": "rejected", "step": 1, "step_id": "g2b0"})
    without.append_step(lost)
    r = invoke("knowledge", "learn", without.path, "--knowledge", learned)
    assert r.exit_code == 0, r.output
    assert r.output.strip() == f"learned 1 entries from {without.path} (0 already held; 1 steps did not win)"
    (got,), (recorded,) = KnowledgeStore(learned).entries(), KnowledgeStore(kept).entries()
    assert (got.id, got.run_id, got.step_id, got.date) == (f"{without.id}/g1b0", without.id, "g1b0", rec.time)
    assert recorded.id == f"{with_store.id}/g1b0"
    assert got.model_dump(exclude={"id", "run_id", "date"}) == recorded.model_dump(exclude={"id", "run_id", "date"})
    assert got.key == "vector-loads-4" and got.gpu == "NVIDIA H100 80GB HBM3" and got.child_ms == 0.8
    # again, by its id in --run-dir, with the run that kept its own: nothing new
    r = invoke("knowledge", "learn", without.id, with_store.id, "--run-dir", tmp_path / "runs", "--knowledge", kept)
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [f"learned 1 entries from {without.id} (0 already held; 1 steps did not win)",
                                     f"learned 0 entries from {with_store.id} (1 already held; 0 steps did not win)"]
    r = invoke("knowledge", "learn", without.id, "--run-dir", tmp_path / "runs", "--knowledge", kept)
    assert r.output.strip() == f"learned 0 entries from {without.id} (1 already held; 1 steps did not win)"
    assert len(KnowledgeStore(kept).entries()) == 2
    # a record edited by hand (a noise band that is not a number): counted as unreadable, no traceback
    bad = rec.model_dump(mode="json")
    bad.update(step_id="g3b0", decision={**bad["decision"], "step": 2, "step_id": "g3b0"},
               outcome={**(bad.get("outcome") or {}), "noise_band": "wide"})
    without.append_step(bad)
    r = invoke("knowledge", "learn", without.id, "--run-dir", tmp_path / "runs", "--knowledge", kept)
    assert r.exit_code == 0, r.output
    assert r.output.strip() == (f"learned 0 entries from {without.id} (1 already held; 1 steps did not win; "
                                "1 step records could not be read)")


def test_learn_from_what_is_not_a_run(tmp_path: Path) -> None:
    """A folder that is not a run, a run id that is none, or a run with no step records: one sentence, exit 2,
    nothing learned (the good run given beside them neither)."""
    store = tmp_path / "k.jsonl"
    (tmp_path / "stuff").mkdir()
    assert one_sentence(invoke("knowledge", "learn", tmp_path / "stuff", "--knowledge", store)) == \
        f"{tmp_path / 'stuff'} is not a run's folder (it has no run.json): give a folder under runs/ or a run id"
    assert one_sentence(invoke("knowledge", "learn", "nope", "--run-dir", tmp_path / "runs", "--knowledge", store)) \
        == f"no run 'nope' in {tmp_path / 'runs'}/: give a run's folder or a run id"
    from kernelwright.tools.runstore import RunStore

    empty = RunStore(tmp_path / "runs").create(str(PROBLEM), PROBLEM.read_text(), {})
    assert one_sentence(invoke("knowledge", "learn", empty.path, "--knowledge", store)) == \
        f"{empty.path} has no step records (its trace.jsonl is missing or empty): nothing to learn"
    assert not store.exists()
