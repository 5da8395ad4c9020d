"""The graph `langgraph dev` serves (langgraph.json): JSON in, a run created, each proposal paused with
LangGraph's human-in-the-loop request and resumed with Agent Chat UI's answers (approve, reject), across
a restart of the server's checkpointer connection; and langgraph.json names what exists."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
from pathlib import Path

import pytest
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command

from kernelwright.graphs import serve
from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"

pytestmark = pytest.mark.timeout(300)


@contextlib.asynccontextmanager
async def _graph(db: Path):  # type: ignore[no-untyped-def]
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        yield serve.served().compile(checkpointer=saver)


async def _session(tmp_path: Path) -> None:
    db, runs, thread = tmp_path / "lg.sqlite", tmp_path / "runs", {"configurable": {"thread_id": "t"}}
    async with _graph(db) as g:
        out = await g.ainvoke({"problem": str(PROBLEM), "seed_kernel": str(SEED), "iterations": 1, "device": "cpu",
                               "runs_dir": str(runs)}, thread)
    (first,) = out["__interrupt__"]
    req = first.value
    assert req["action_requests"][0]["name"] == "propose_change" and req["step_id"] == "g1b0"
    assert req["review_configs"][0]["allowed_decisions"] == ["approve", "edit", "reject", "respond"]
    # the server restarts while the review waits: a new connection to the same database
    async with _graph(db) as g:
        out = await g.ainvoke(Command(resume={first.id: {"decisions": [{"type": "reject", "message": "not now"}]}}),
                              thread)
        (second,) = out["__interrupt__"]  # a rejection does not count against the one iteration
        assert second.value["step_id"] == "g2b0"
        out = await g.ainvoke(Command(resume={second.id: {"decisions": [{"type": "approve"}]}}), thread)
    assert "__interrupt__" not in out and out["status"] == "finished"
    run = RunStore(runs).open(out["run_id"])
    trace = run.trace()
    assert [(r["step_id"], r["review"]["decision"], r["review"]["by"]) for r in trace] == [
        ("g1b0", "reject", "langgraph"), ("g2b0", "approve", "langgraph")]
    assert trace[0]["decision"]["why"] == "rejected by the reviewer: not now"


def test_the_served_graph_pauses_for_agent_chat_ui_and_survives_a_restart(tmp_path: Path) -> None:
    asyncio.run(_session(tmp_path))


def test_a_bad_problem_ends_the_thread_with_one_sentence(tmp_path: Path) -> None:
    async def go() -> dict:  # type: ignore[type-arg]
        async with _graph(tmp_path / "lg.sqlite") as g:
            return await g.ainvoke({"problem": str(tmp_path / "nope.py"), "runs_dir": str(tmp_path / "runs")},
                                   {"configurable": {"thread_id": "t"}})

    out = asyncio.run(go())
    assert out["status"] == "failed" and "nope.py" in out["error"] and "\n" not in out["error"]


def test_langgraph_json_names_what_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = json.loads((ROOT / "langgraph.json").read_text())
    for spec in [*cfg["graphs"].values(), cfg["checkpointer"]["path"]]:
        path, _, name = spec.partition(":")
        module = importlib.import_module("kernelwright." + path.removeprefix("./").removesuffix(".py").replace("/", "."))
        assert hasattr(module, name), spec
    monkeypatch.setenv("KERNELWRIGHT_LANGGRAPH_DB", str(tmp_path / "db" / "lg.sqlite"))

    async def open_it() -> str:
        async with serve.checkpointer() as saver:
            return type(saver).__name__

    assert asyncio.run(open_it()) == "AsyncSqliteSaver" and (tmp_path / "db" / "lg.sqlite").exists()


async def _refused(tmp_path: Path) -> list[dict]:
    outs = []
    async with _graph(tmp_path / "lg.sqlite") as g:
        for i, extra in enumerate(({"actors": 2}, {"cluster": "somewhere", "device": "cpu"})):
            outs.append(await g.ainvoke({"problem": str(PROBLEM), "seed_kernel": str(SEED), "iterations": 1,
                                         "runs_dir": str(tmp_path / "runs"), **extra},
                                        {"configurable": {"thread_id": f"bad{i}"}}))
    return outs


def test_a_bad_cluster_setting_fails_the_thread_with_one_sentence(tmp_path: Path) -> None:
    lone, far = asyncio.run(_refused(tmp_path))
    assert lone["status"] == "failed" and "actors (the number of evaluation actors) need a Ray cluster" in lone["error"]
    assert far["status"] == "failed" and "somewhere" in far["error"]
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())  # no run was left


def test_a_chat_client_starts_a_run_with_a_message_and_is_answered_in_messages(tmp_path: Path) -> None:
    """Agent Chat UI sends only messages and draws a pause below one: the settings come as key=value words (or
    JSON) in the last human message; the thread says when the run starts and when it ends; with two branches
    both pauses come through with the messages riding along the inner graph's states."""
    runs, thread = tmp_path / "runs", {"configurable": {"thread_id": "chat"}}

    async def go() -> tuple[dict, dict]:  # type: ignore[type-arg]
        async with _graph(tmp_path / "lg.sqlite") as g:
            text = f"problem={PROBLEM} seed_kernel={SEED} iterations=2 branches=2 device=cpu runs_dir={runs}"
            out = await g.ainvoke({"messages": [{"role": "user", "content": text}]}, thread)
            paused = out
            first, second = out["__interrupt__"]
            out = await g.ainvoke(Command(resume={first.id: {"decisions": [{"type": "approve"}]},
                                                  second.id: {"decisions": [{"type": "approve"}]}}), thread)
            return paused, out

    paused, out = asyncio.run(go())
    said = [m.content for m in paused["messages"] if m.type == "ai"]
    assert len(said) == 1 and "is under way: each proposal pauses here for your decision" in said[0]
    assert "__interrupt__" not in out and out["status"] == "finished"
    said = [m.content for m in out["messages"] if m.type == "ai"]
    assert said[-1].startswith(f"Run {out['run_id']}: finished (iteration budget reached (2 steps)")
    trace = RunStore(runs).open(out["run_id"]).trace()
    assert sorted(r["review"]["decision"] for r in trace) == ["approve", "approve"]


def test_a_chat_message_that_gives_no_settings_is_answered_in_one_sentence(tmp_path: Path) -> None:
    async def go(text: str) -> dict:  # type: ignore[type-arg]
        async with _graph(tmp_path / "lg.sqlite") as g:
            return await g.ainvoke({"messages": [{"role": "user", "content": text}]},
                                   {"configurable": {"thread_id": text[:20]}})

    for text, why in (("optimise my softmax please", "is not key=value"), ('{"problem": ', "not valid JSON"),
                      ("problem=x.py color=red", "'color' is not a setting"),
                      (f"problem={tmp_path / 'nope.py'} runs_dir={tmp_path / 'runs'}", "nope.py")):
        out = asyncio.run(go(text))
        (said,) = [m.content for m in out["messages"] if m.type == "ai"]
        assert out["status"] == "failed" and said.startswith("Nothing started: ") and why in said, said


def test_the_served_graph_has_an_input_schema_for_studios_form() -> None:
    """langgraph-api serves the graph's input schema (Studio builds its input form from it); on Python 3.11 pydantic
    builds it only from typing_extensions.TypedDict, and the server then answered input_schema: null."""
    props = serve.graph.get_input_jsonschema()["properties"]
    assert {"problem", "seed_kernel", "iterations", "device", "review", "messages"} <= set(props)
