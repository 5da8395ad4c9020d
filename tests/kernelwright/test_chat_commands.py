"""The chat's commands in process, against a run's review desk with no driver: /edit through $EDITOR and
inline, /propose, /kernel, /pin, /ban, /auto, /status, /best, bad input in one sentence."""

from __future__ import annotations

import io
import stat
from pathlib import Path

import pytest
from rich.console import Console

from kernelwright import api
from kernelwright.chat import Chat
from kernelwright.tools.review_desk import PendingReview, ReviewDesk

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"
PROPOSAL = {"category": "tiling", "what": "BLOCK 256 -> 512", "why": "more bytes in flight", "predicted_speedup": 1.1,
            "risk": "low", "key": "BLOCK=512"}


@pytest.fixture
def chat(tmp_path: Path) -> Chat:
    runs = tmp_path / "runs"
    with api.start_run(PROBLEM, seed_kernel=SEED, config=api.RunConfig(device="cpu", review="proposals"),
                       runs_dir=runs) as h:
        pass
    ReviewDesk(h.run).post([PendingReview(step_id="g1b0", parent=h.run.info().config.seed_kernel or "",
                                          proposal=PROPOSAL)])
    return Chat(h.id, runs, Console(file=io.StringIO(), width=200))


def said(chat: Chat) -> str:
    return chat.console.file.getvalue()  # type: ignore[attr-defined]


def decision(chat: Chat):  # type: ignore[no-untyped-def]
    return ReviewDesk(api.open_run(chat.run_id, chat.runs_dir).run).decisions().get("g1b0")


def test_edit_in_the_editor(chat: Chat, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nsed -i 's/BLOCK 256 -> 512/BLOCK 256 -> 1024/' \"$1\"\n")
    editor.chmod(editor.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("EDITOR", str(editor))
    chat.command("/edit")
    d = decision(chat)
    assert d.type == "edit" and d.proposal["what"] == "BLOCK 256 -> 1024" and d.by.startswith("chat:")
    assert "edit g1b0" in said(chat)


def test_edit_inline_and_without_an_editor(chat: Chat, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EDITOR", raising=False)
    monkeypatch.delenv("VISUAL", raising=False)
    chat.command("/edit")
    assert "needs $EDITOR" in said(chat) and decision(chat) is None
    chat.command("/edit BLOCK 256 -> 128")
    assert decision(chat).proposal["what"] == "BLOCK 256 -> 128"


def test_propose_and_kernel(chat: Chat, tmp_path: Path) -> None:
    chat.command("/kernel /no/such/file.py")
    assert "no file /no/such/file.py" in said(chat) and decision(chat) is None
    chat.command("/propose split each row over two programs")  # the run's coder is builtin: knobs only
    assert "the builtin coder applies knob changes only" in said(chat) and "NUM_WARPS=4" in said(chat)
    assert decision(chat) is None
    chat.command("/propose NUM_WARPS 4 -> 2")
    d = decision(chat)
    assert d.type == "respond" and d.proposal["what"] == "NUM_WARPS 4 -> 2" and d.proposal["key"] == "NUM_WARPS=2"


def test_steering_commands_and_reading_the_run(chat: Chat) -> None:
    chat.command("/ban warps")
    chat.command("/ban everything")
    assert "name a kind of move" in said(chat)
    chat.command("/pin ffff")
    assert "has no kernel ffff" in said(chat)
    seed = api.open_run(chat.run_id, chat.runs_dir).info().config.seed_kernel or ""
    chat.command(f"/pin {seed[:8]}")  # not in the archive until the seed has been judged
    assert "not in the run's archive" in said(chat)
    chat.command("/status")
    out = said(chat)
    assert "waiting for a review: g1b0" in out and "tiling" not in out.split("steering:")[1].split("\n")[0]
    assert "warps" in out.split("steering:")[1] and "driven by nobody" in out
    chat.command("/best")
    chat.command("/why")
    chat.command("/frobnicate")
    out = said(chat)
    assert "no step has been recorded yet" in out and "unknown command /frobnicate" in out
    chat.command("/reject")
    assert "needs a reason" in said(chat)
    chat.command("/auto")
    assert decision(chat).type == "approve" and chat.auto
    chat.command("/confirm")
    assert not chat.auto
