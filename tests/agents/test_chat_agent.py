"""The chat agent: free text answered by the run's model through read tools over the run, and the same
actions as the chat's commands, recorded as the chat's. And the builtin strategist honours bans."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from langchain_core.messages import AIMessage

from kernelwright.agents import chat_agent
from kernelwright.agents.builtin import propose
from kernelwright.agents.schemas import Diagnosis
from kernelwright.tools.review_desk import PendingReview, ReviewDesk
from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "agents"))
from scripted import DIAGNOSIS, PROPOSAL, Scripted, call  # noqa: E402

SEED = (ROOT / "tests" / "graphs" / "add_seed.py").read_text()


def test_free_text_reads_the_run_and_acts_through_the_desk(tmp_path: Path) -> None:
    run = RunStore(tmp_path).create("p.py", "source", {})
    h = run.put_kernel(SEED)
    desk = ReviewDesk(run)
    desk.post([PendingReview(step_id="g1b0", parent=h, proposal=PROPOSAL)])
    m = Scripted(script=[call("pending_reviews", {}, 0), call("kernel_source", {"kernel": h[:6]}, 1),
                         call("reject", {"reason": "the person wants warps left alone"}, 2),
                         call("steer", {"note": "leave warps alone"}, 3),
                         AIMessage(content="Rejected g1b0 and noted: leave warps alone.")])
    history: list = []
    answer = chat_agent.ask(m, chat_agent.RunTools(run, "chat:test"), "reject it, we leave warps alone", history)
    assert answer == "Rejected g1b0 and noted: leave warps alone."
    tool_out = [msg.content for msg in history if msg.type == "tool"]
    assert "BLOCK=512" in tool_out[0] and "@triton.jit" in tool_out[1] and tool_out[2] == "reject recorded for g1b0"
    d = desk.decisions()["g1b0"]
    assert d.type == "reject" and d.message == "the person wants warps left alone" and d.by == "chat:test"
    assert desk.steering().notes == ["leave warps alone"]
    # the conversation goes on with what was said before
    m.script.append(AIMessage(content="Nothing waits now."))
    chat_agent.ask(m, chat_agent.RunTools(run, "chat:test"), "anything else?", history)
    assert any("reject it, we leave warps alone" in str(x.content) for x in m.seen[-1])


def test_the_builtin_strategist_never_proposes_a_banned_kind() -> None:
    d = Diagnosis.model_validate(DIAGNOSIS)
    free = propose(SEED, d, {}, set(), random.Random(0))
    assert free is not None
    banned = propose(SEED, d, {}, set(), random.Random(0), banned=frozenset({free.category}))
    assert banned is not None and banned.category != free.category
    # the seed's knobs are a block size and a warp count: with both kinds banned, alone or paired, nothing is left
    assert propose(SEED, d, {}, set(), random.Random(0), plateaued=True, banned=frozenset({"tiling", "warps"})) is None
