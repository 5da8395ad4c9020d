"""What a chat client's model meets over MCP (issue 24, item 9): every tool parameter described, the allowed
values of decision, review, kind listed, what a null device picks said; empty results as a sentence, never no
text; what the iteration budget counts; trials per input family; why a CPU run's best kernel is its seed and
which verified children exist; what the builtin strategist cannot read; a pin on a finished run refused; the
problem's inputs shown with a review."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from kernelwright import api, mcp_server  # noqa: E402
from kernelwright.api import UsageError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"


def _tools(runs: Path) -> dict[str, Any]:
    app = mcp_server.build(runs)
    return {t.name: t for t in asyncio.run(app.list_tools())}


def _text(app: Any, name: str, **args: Any) -> str:
    """What a client reads of a tool's answer: its text content, joined."""
    result = asyncio.run(app.call_tool(name, args))
    assert not result.is_error, result.content
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


def _created_run(runs: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A run made and never driven (nothing judged, nothing waiting)."""
    monkeypatch.setattr(api, "check_confinement", lambda *a, **k: None)
    cfg = api.RunConfig(device="cpu", trials=1, branches=1, iterations=2, review="proposals")
    with api.start_run(PROBLEM, seed_kernel=SEED, config=cfg, runs_dir=runs) as handle:
        return handle.id


# -- the schemas ------------------------------------------------------------------------------------------


def test_every_parameter_is_described(tmp_path: Path) -> None:
    tools = _tools(tmp_path)
    bare = [f"{name}.{p}" for name, t in tools.items() for p, spec in t.input_schema.get("properties", {}).items()
            if not spec.get("description")]
    assert bare == [], f"parameters without words: {bare}"


def test_allowed_values_are_listed(tmp_path: Path) -> None:
    tools = _tools(tmp_path)

    def prop(tool: str, name: str) -> dict[str, Any]:
        return tools[tool].input_schema["properties"][name]

    assert prop("review", "decision")["enum"] == ["approve", "edit", "reject", "respond"]
    assert prop("steer", "kind")["enum"] == ["note", "pin", "ban", "unpin", "unban", "clear"]
    assert prop("start_run", "review")["enum"] == ["proposals", "none"]
    for tool in ("start_run", "evaluate"):
        words = prop(tool, "device")["description"]
        assert "null: cuda when the server's machine has a GPU, else cpu" in words
    assert "per input family" in prop("evaluate", "trials")["description"]
    assert "does not count" in prop("start_run", "iterations")["description"]


def test_a_value_outside_the_list_is_refused_with_the_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    app = mcp_server.build(tmp_path)
    run_id = _created_run(tmp_path, monkeypatch)
    with pytest.raises(ToolError, match="approve"):
        asyncio.run(app.call_tool("review", {"run_id": run_id, "decision": "maybe"}))
    with pytest.raises(ToolError, match="note"):
        asyncio.run(app.call_tool("steer", {"run_id": run_id, "text": "x", "kind": "shout"}))


# -- empty answers are sentences ------------------------------------------------------------------------


def test_empty_answers_are_sentences(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = mcp_server.build(tmp_path)
    assert _text(app, "list_runs") == f"no runs in {tmp_path} yet: start one with start_run"
    run_id = _created_run(tmp_path, monkeypatch)
    waiting = json.loads(_text(app, "pending_review", run_id=run_id))
    assert waiting["step_id"] is None and f"no step of run {run_id} waits for a review now" in waiting["note"]
    assert _text(app, "get_trace", run_id=run_id) == f"run {run_id} has no steps yet"
    best = json.loads(_text(app, "best_kernel", run_id=run_id))
    assert best["hash"] is None and "no judged kernel yet" in best["note"]
    listed = asyncio.run(app.call_tool("list_runs", {}))  # with a run, the list itself
    assert [r["run_id"] for r in listed.structured_content["result"]] == [run_id]


# -- steering words ---------------------------------------------------------------------------------------


def test_a_pin_on_a_finished_run_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = _created_run(tmp_path, monkeypatch)
    server = mcp_server.Server(tmp_path)
    api.open_run(run_id, tmp_path).run.update(status="finished", stop_reason="iteration budget reached")
    with pytest.raises(UsageError, match=f"run {run_id} is finished: a pin would steer no step"):
        server.steer(run_id, "0123456789ab", "pin")
    said = server.steer(run_id, "keep BLOCK a power of two", "note")
    assert f"run {run_id} is finished: this steers it only if it is resumed" in said["note"]
    assert "the builtin strategist cannot read notes" in said["note"]


def test_a_note_for_a_model_strategist_says_nothing_of_the_builtin(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = _created_run(tmp_path, monkeypatch)
    server = mcp_server.Server(tmp_path)
    monkeypatch.setattr(server, "_strategist", lambda rid: "openai:gpt-4.1")
    said = server.steer(run_id, "keep BLOCK a power of two", "note")
    assert "note" not in said, said  # a created run, a model strategist: nothing to warn of


# -- a reviewed run on the CPU --------------------------------------------------------------------------


def _wait(what: Any, timeout: float = 240) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError("timed out")


@pytest.mark.slow
@pytest.mark.timeout(500)
def test_a_reviewed_run_says_what_a_model_needs(tmp_path: Path) -> None:
    server = mcp_server.Server(tmp_path)
    try:
        run_id = server.start_run(str(PROBLEM), seed_kernel=str(SEED), iterations=2, branches=1, device="cpu",
                                  review="proposals", trials=1)["run_id"]

        def waiting() -> dict[str, Any] | None:
            p = server.pending_review(run_id)
            assert server.run_status(run_id)["error"] is None
            return p if p["step_id"] else None

        first = _wait(waiting)
        assert first["problem"] == str(PROBLEM) and first["problem_inputs"] == ["float32[1000]", "float32[1000]"]
        said = server.review(run_id, "reject", message="not this one")
        assert "the builtin strategist cannot read it" in said["note"]
        assert "note" not in server.review(run_id, "approve", step_id=_wait(waiting)["step_id"])
        server.review(run_id, "approve", step_id=_wait(waiting)["step_id"])
        status = _wait(lambda: (s := server.run_status(run_id))["status"] not in ("created", "running",
                                                                                 "awaiting review") and s)
        assert status["steps"] == 3, status
        assert status["budget"] == ("3 steps, 1 of them rejected in review; the iteration budget (2) counts "
                                    "evaluated children only, so a rejected proposal is a step in the trace that "
                                    "does not count")

        best = server.best_kernel(run_id)
        assert best["verdict"] == "pass" and best["median_ms"] is None
        passed = {r["child"] for r in server.get_trace(run_id) if r["verdict"] == "pass"}
        assert passed and set(best["verified_untimed"]) == passed - {best["hash"]}, (passed, best)
        assert best["note"].startswith("nothing was timed (kernels are not timed on the CPU), so nothing is ranked")

        job = server.evaluate(str(PROBLEM), str(SEED), device="cpu", trials=1)["job_id"]
        done = _wait(lambda: (r := server.job_result(job))["status"] != "running" and r, timeout=200)
        assert done["status"] == "finished", done
        families = done["result"]["families"]
        assert done["trials"].startswith(f"1 trial per input family × {len(families)} families")
        assert f"= {len(families)} in all" in done["trials"]
    finally:
        server.close()
