"""`kernelwright mcp` over stdio, driven with the `mcp` client SDK as a chat client would: a run with
proposal reviews, approved, edited, answered with the client's own proposal and rejected, its trace, a
steering note, and a clean stop."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

mcp = pytest.importorskip("mcp")
from mcp import Client, StdioServerParameters  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"

pytestmark = pytest.mark.slow


def _value(result: Any) -> Any:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        sc = result.structured_content
        return sc.get("result", sc) if isinstance(sc, dict) and set(sc) == {"result"} else sc
    text = result.content[0].text if result.content else "null"
    return json.loads(text)


async def _call(client: Client, name: str, **args: Any) -> Any:
    t0 = time.monotonic()
    value = _value(await client.call_tool(name, args))
    assert time.monotonic() - t0 < 10, f"{name} took {time.monotonic() - t0:.1f} s: tools must return quickly"
    return value


async def _wait_pending(client: Client, run_id: str, timeout: float = 240) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        p = await _call(client, "pending_review", run_id=run_id)
        if p and p.get("step_id"):  # none waiting: step_id null and a note
            return p
        status = await _call(client, "run_status", run_id=run_id)
        assert status["error"] is None, status
        await asyncio.sleep(0.3)
    raise AssertionError("no review was posted")


async def _session(run_dir: Path) -> None:
    server = StdioServerParameters(command=sys.executable,
                                   args=["-m", "kernelwright.cli", "mcp", "--run-dir", str(run_dir)], cwd=str(ROOT))
    async with Client(server) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"start_run", "run_status", "pending_review", "review", "steer", "stop_run", "list_runs", "get_trace",
                "best_kernel", "evaluate", "job_result"} <= names

        bad = await client.call_tool("start_run", {"problem": str(ROOT / "nope.py"), "seed_kernel": str(SEED)})
        assert bad.is_error and "nope.py" in bad.content[0].text
        lone = await client.call_tool("start_run", {"problem": str(PROBLEM), "seed_kernel": str(SEED), "actors": 2})
        assert lone.is_error and "actors (the number of evaluation actors) need a Ray cluster" in lone.content[0].text
        far = await client.call_tool("start_run", {"problem": str(PROBLEM), "seed_kernel": str(SEED),
                                                   "cluster": "somewhere", "device": "cpu"})
        assert far.is_error and "somewhere" in far.content[0].text and "Traceback" not in far.content[0].text

        started = await _call(client, "start_run", problem=str(PROBLEM), seed_kernel=str(SEED), model="builtin",
                              iterations=8, branches=1, device="cpu", review="proposals")
        run_id = started["run_id"]

        # 1: approve the strategist's proposal
        p1 = await _wait_pending(client, run_id)
        assert p1["step_id"] == "g1b0" and p1["proposal"]["what"] and "approve" in p1["allowed_decisions"]
        assert "@triton.jit" in p1["parent_source"]
        await _call(client, "review", run_id=run_id, decision="approve")

        # 2: edit it (the builtin coder applies moves by key: keep the key, change the prediction and reason)
        p2 = await _wait_pending(client, run_id)
        assert p2["step_id"] == "g2b0"
        edited = {**p2["proposal"], "why": "edited by the client", "predicted_speedup": 1.5}
        await _call(client, "review", run_id=run_id, decision="edit", proposal=edited)

        # 3: respond with a kernel of the client's own (the client's model plays the coder)
        p3 = await _wait_pending(client, run_id)
        own = SEED.read_text().replace("BLOCK = 256", "BLOCK = 64")
        assert own != SEED.read_text()
        await _call(client, "review", run_id=run_id, decision="respond", kernel=own, message="BLOCK 64 by hand")
        await _call(client, "steer", run_id=run_id, text="keep BLOCK a power of two")

        # 4: respond with a proposal of its own (plays the strategist), then 5: reject one with a reason
        p4 = await _wait_pending(client, run_id)
        assert p4["step_id"] == "g4b0"
        await _call(client, "review", run_id=run_id, decision="respond",
                    proposal={**p4["proposal"], "why": "the client's own reasoning"})
        p5 = await _wait_pending(client, run_id)
        assert p5["step_id"] == "g5b0"
        await _call(client, "review", run_id=run_id, decision="reject", message="not this one")
        await _wait_pending(client, run_id)
        bad_decision = await client.call_tool("review", {"run_id": run_id, "decision": "maybe"})
        assert bad_decision.is_error and "approve" in bad_decision.content[0].text

        trace = await _call(client, "get_trace", run_id=run_id)
        by_id = {r["step_id"]: r for r in trace}
        assert [by_id[s]["review"]["decision"] for s in ("g1b0", "g2b0", "g3b0", "g4b0", "g5b0")] == [
            "approve", "edit", "respond", "respond", "reject"]
        for s in ("g1b0", "g2b0", "g3b0", "g4b0", "g5b0"):
            assert by_id[s]["review"]["by"].startswith("mcp:") and by_id[s]["review"]["at"]
        assert by_id["g2b0"]["proposal"]["why"] == "edited by the client"
        assert by_id["g2b0"]["review"]["original_proposal"]["why"] != "edited by the client"
        assert by_id["g3b0"]["review"]["kernel_given"] and by_id["g3b0"]["coder"]["policy"] == "human"
        assert "BLOCK = 64" in by_id["g3b0"]["coder"]["diff"] and by_id["g3b0"]["verdict"] == "pass"
        assert by_id["g4b0"]["steering"]["notes"] == ["keep BLOCK a power of two"]
        assert by_id["g5b0"]["decision"]["why"] == "rejected by the reviewer: not this one"
        assert by_id["g5b0"]["child"] is None

        stopped = await _call(client, "stop_run", run_id=run_id)
        assert stopped["stopped"], stopped
        status = await _call(client, "run_status", run_id=run_id)
        assert status["status"] == "awaiting review" and status["pending_reviews"] == ["g6b0"]
        assert not status["driven_here"]
        runs = await _call(client, "list_runs")
        assert [r["run_id"] for r in runs] == [run_id]
        best = await _call(client, "best_kernel", run_id=run_id)
        assert best["hash"] and "@triton.jit" in best["source"]

        job = await _call(client, "evaluate", problem=str(PROBLEM), candidate=str(SEED), device="cpu", trials=1)
        end = time.monotonic() + 120
        while True:
            r = await _call(client, "job_result", job_id=job["job_id"])
            if r["status"] != "running" or time.monotonic() > end:
                break
            await asyncio.sleep(0.5)
        assert r["status"] == "finished" and r["result"]["verdict"] == "pass", r


def test_a_chat_client_drives_a_reviewed_run_over_stdio(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_session(tmp_path), timeout=540))
