"""What the model roles are sent, said once: one candidate contract for the first-kernel writer, the coder and
the docs; the strategist reads the analyst's diagnosis, not the analyst's inputs again; the coder reads the
proposal, not the diagnosis; the coder's conversation drops drafts a later edit replaced."""

from __future__ import annotations

import sys
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from kernelwright import prompts
from kernelwright.agents import llm
from kernelwright.agents.schemas import Diagnosis, Proposal
from kernelwright.evaluators import EvalResult
from kernelwright.evaluators.facts import DeviceFacts, render_facts

sys.path.insert(0, str(Path(__file__).parent))
from scripted import DIAGNOSIS, PROPOSAL, Scripted, call  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SEED = (ROOT / "tests" / "graphs" / "add_seed.py").read_text()


def test_one_contract_for_the_writer_the_coder_and_the_docs() -> None:
    contract = prompts.contract()
    assert "smaller tickets" in contract and "as_strided" in contract and "1e-4" in contract
    m = Scripted(script=[call("write_kernel", {"source": SEED}, 0), call("finish", {}, 1)])
    llm.write(m, "problem source", lambda s: (True, "ok"))
    writer_prompt = m.seen[0][0].content
    m = Scripted(script=[call("finish", {}, 0)])
    llm.code(m, SEED, Proposal(**PROPOSAL), lambda s: (True, "ok"), problem="problem source")
    coder_prompt = m.seen[0][0].content
    docs = (ROOT / "docs" / "contract.md").read_text()
    for text in (writer_prompt, coder_prompt, docs):
        assert contract in text


def _timed_result() -> EvalResult:
    from kernelwright.evaluators.result import Timing

    t = Timing(median_ms=0.309, p25_ms=0.305, p75_ms=0.31, min_ms=0.3, max_ms=0.32, reps=30, wall_median_ms=0.4,
               noise_band=0.012, eager_ms=8.3, speedup_vs_eager=26.9, vs_eager="faster", compile_mode="max-autotune",
               compile_ms=0.309, speedup_vs_compile=1.0, vs_compile="no change", floor_ms=0.134,
               fraction_of_floor=0.434, bound="memory", best_baseline_ms=0.309,
               best_baseline="torch.compile")
    return EvalResult(verdict="pass", reason="ok", device="cuda:0", timing=t)


def test_the_strategist_reads_the_diagnosis_not_the_analysts_inputs() -> None:
    standing = llm.standing(_timed_result())
    assert "0.309 ms" in standing and "1.00× torch.compile (max-autotune)" in standing and "43% of the roofline" in standing
    d = Diagnosis(**{**DIAGNOSIS, "evidence": ["normalise kernel: DRAM read 1.06 GB (ncu)"]})
    m = Scripted(script=[call("Proposal", PROPOSAL, 0)])
    llm.strategise(m, problem="P", parent=SEED, standing=standing, diagnosis=d, history="", failed=[],
                   usage=llm.Usage())
    prompt = m.seen[0][0].content
    assert "DRAM read 1.06 GB (ncu)" in prompt and standing in prompt
    assert '"bottleneck"' not in prompt  # the diagnosis as text, not its JSON
    assert "What the analyst read" not in prompt  # no copy of the profile where a model analyst read it
    m = Scripted(script=[call("Proposal", PROPOSAL, 0)])
    llm.strategise(m, problem="P", parent=SEED, standing=standing, diagnosis=d, history="", failed=[],
                   usage=llm.Usage(), evidence="PROFILE-TEXT")
    assert "PROFILE-TEXT" in m.seen[0][0].content  # the builtin analyst's thin reading: the profile goes along


def test_brief_facts_leave_out_the_measured_peaks() -> None:
    f = DeviceFacts(device="cuda:0", name="NVIDIA H100 80GB HBM3", timed=True, admission="ADMISSION RULE",
                    compute_capability="9.0", sms=132, memory_bytes=80 * 10**9, peak_copy_bytes_per_s=3.0e12,
                    matmul_flops={"fp32": 5.0e13})
    whole, brief = render_facts(f), render_facts(f, brief=True)
    assert "matmul peaks" in whole and "matmul peaks" not in brief and "copy bandwidth" not in brief
    assert "132 SMs" in brief and "ADMISSION RULE" in brief and len(brief) < len(whole)


def test_the_coder_reads_the_proposal_not_the_diagnosis() -> None:
    m = Scripted(script=[call("finish", {}, 0)])
    llm.code(m, SEED, Proposal(**PROPOSAL), lambda s: (True, "ok"), problem="P")
    prompt = m.seen[0][0].content
    assert PROPOSAL["what"] in prompt and PROPOSAL["why"] in prompt
    assert DIAGNOSIS["summary"] not in prompt and "The diagnosis" not in prompt


def test_the_coders_conversation_drops_replaced_drafts() -> None:
    draft1 = SEED.replace("BLOCK = 256\n", "BLOCK = 128\n")
    draft2 = SEED.replace("BLOCK = 256\n", "BLOCK = 512\n")
    m = Scripted(script=[call("write_kernel", {"source": draft1}, 0), call("quick_check", {}, 1),
                         call("view_kernel", {"start": 1, "end": 400}, 2), call("write_kernel", {"source": draft2}, 3),
                         call("finish", {}, 4)])
    checks = iter([(False, "wrong_output: " + "x" * 400), (True, "ok")])
    child, _ = llm.code(m, SEED, Proposal(**PROPOSAL), lambda s: next(checks), problem="P")
    assert child == draft2
    last = m.seen[-1]  # the conversation the last call was sent
    sent = "\n".join(str(x.content) for x in last) + _sources(last)
    assert draft2 in sent  # the latest edit stays whole
    assert draft1 not in sent and llm.SUPERSEDED in sent  # the replaced draft does not
    assert "x" * 400 not in sent  # nor the long failure message of a check on it
    # the earlier turns were sent whole at the time (the draft in the call that followed its writing)
    assert any(draft1 in _sources(seen) for seen in m.seen[1:3])


def _sources(messages: list) -> str:
    return "".join(str(c["args"].get("source", "")) for x in messages if isinstance(x, AIMessage) for c in x.tool_calls)


def test_compaction_leaves_a_conversation_without_edits_alone() -> None:
    msgs = [HumanMessage("prompt"), AIMessage(content="", tool_calls=[{"name": "view_kernel", "args": {}, "id": "v"}]),
            ToolMessage("y" * 500, tool_call_id="v")]
    llm.compact(msgs)
    assert msgs[2].content == "y" * 500
