"""The language-model policies driven by a scripted chat model: structured answers with repair, the
coder's tool loop (errors answered, repairs bounded), retries, accounting. No network, no GPU."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from kernelwright import prompts
from kernelwright.agents import llm
from kernelwright.agents.schemas import Diagnosis, Proposal
from kernelwright.tools.coding import Workspace, coder_tools

sys.path.insert(0, str(Path(__file__).parent))
from scripted import DIAGNOSIS, PROPOSAL, Scripted, call, malformed  # noqa: E402

SEED = (Path(__file__).resolve().parents[1] / "graphs" / "add_seed.py").read_text()


def test_prompts_fill_with_their_fields() -> None:
    a = prompts.load("analyst").format(problem="P", parent="K", evaluation="E", profile="F", facts="G",
                                       parent_label="L", history="H")
    s = prompts.load("strategist").format(problem="P", parent="K", standing="E", diagnosis="D", history="H",
                                          failed="X", siblings="S", facts="G", evidence="V", inspirations="I",
                                          predictions="R", playbook="B", parent_label="L")
    c = prompts.load("coder").format(problem="P", parent="K", proposal="Q", facts="G", contract=prompts.contract(),
                                     inspirations="I", quick_check="C", parent_label="L", coverage="V")
    w = prompts.load("writer").format(problem="P", facts="G", quick_check="C", contract=prompts.contract(),
                                      learned="")
    assert "Diagnosis tool" in a and "Proposal tool" in s and "search_replace" in c and "write_kernel" in w
    # every field a template names is filled: no stray braces remain
    for text in (a, s, c, w):
        assert "{" not in text.replace("{{", "") or "```" in text
    with pytest.raises(KeyError):
        prompts.load("nobody")


def test_analyse_sends_an_invalid_answer_back_and_keeps_reasoning() -> None:
    bad = call("Diagnosis", {**DIAGNOSIS, "bottleneck": "warp-drive"}, 0)
    good = call("Diagnosis", DIAGNOSIS, 1)
    good.additional_kwargs["reasoning_content"] = "It only streams two vectors."
    m = Scripted(script=[bad, good])
    usage, transcript = llm.Usage(model="scripted:x"), []
    d = llm.analyse(m, problem="p", parent=SEED, evaluation="e", profile="f", usage=usage, transcript=transcript)
    assert isinstance(d, Diagnosis) and d.bottleneck == "memory"
    err = m.seen[1][-1]
    assert isinstance(err, ToolMessage) and "bottleneck" in err.content and err.tool_call_id == "Diagnosis-0"
    assert usage.calls == 2 and usage.tokens == 220 and usage.reasoning == ["It only streams two vectors."]
    assert any(t.get("reasoning") for t in transcript)


def test_strategise_survives_a_malformed_tool_call_and_costs_are_priced() -> None:
    m = Scripted(script=[malformed("Proposal", "{\"category\": tiling"), call("Proposal", PROPOSAL, 1)])
    usage = llm.Models(prices={"x": [1.0, 10.0]}).usage("scripted:x")  # priced by its bare model name
    p = llm.strategise(m, problem="p", parent=SEED, standing="s", diagnosis=Diagnosis(**DIAGNOSIS), history="",
                       failed=[], usage=usage)
    assert isinstance(p, Proposal) and p.key == "BLOCK=512"
    assert "could not be parsed" in m.seen[1][-1].content
    assert usage.cost_usd == pytest.approx((150 * 1.0 + 15 * 10.0) / 1e6)


def test_structured_answers_are_bounded_and_json_text_is_accepted() -> None:
    m = Scripted(script=[AIMessage(content="sure!")] * 3)
    with pytest.raises(llm.ModelError, match="no valid Diagnosis in 3 tries"):
        llm.analyse(m, problem="p", parent="k", evaluation="e", profile="f", usage=llm.Usage())
    import json
    m = Scripted(script=[AIMessage(content=f"Here: {json.dumps(DIAGNOSIS)}")])
    d = llm.analyse(m, problem="p", parent="k", evaluation="e", profile="f", usage=llm.Usage())
    assert d.bottleneck == "memory"


def test_a_tried_proposal_is_not_accepted_again() -> None:
    m = Scripted(script=[call("Proposal", PROPOSAL)])
    with pytest.raises(llm.ModelError, match="already tried"):
        llm.strategise(m, problem="p", parent=SEED, standing="s", diagnosis=Diagnosis(**DIAGNOSIS), history="",
                       failed=["BLOCK=512"], usage=llm.Usage())


def test_the_coder_edits_through_tools_and_errors_go_back() -> None:
    checked: list[str] = []

    def quick(src: str) -> tuple[bool, str]:
        checked.append(src)
        return True, "ok"

    m = Scripted(script=[
        call("view_kernel", {"start": 1, "end": 8}, 0),
        call("search_replace", {"old": "BLOCK", "new": "X"}, 1),            # 7 matches: refused
        malformed("search_replace", "{\"old\": \"BLOCK = 256", 2),
        call("search_replace", {"old": "BLOCK = 256\n", "new": "BLOCK = 512\n"}, 3),
        call("nonsense", {}, 4),
        call("quick_check", {}, 5),
        call("finish", {}, 6),
    ])
    child, transcript = llm.code(m, SEED, Proposal(**PROPOSAL), quick)
    assert child is not None and "BLOCK = 512\n" in child and child.replace("BLOCK = 512\n", "BLOCK = 256\n") == SEED
    replies = [t["content"] for t in transcript if t["role"] == "tool"]
    assert "   7| BLOCK = 256" in replies[0]
    assert "matches 7 times" in replies[1] and "could not be parsed" in replies[2]
    assert replies[3] == "replaced 1 occurrence" and "unknown tool" in replies[4]
    assert replies[5] == "pass: ok" and replies[6] == "done"
    assert checked == [child]  # finish reuses the check of the unchanged source


def test_the_coder_repairs_its_own_failures_within_bounds() -> None:
    broken = SEED.replace("BLOCK = 256\n", "BLOCK = = 512\n")
    m = Scripted(script=[
        call("write_kernel", {"source": broken}, 0),
        call("finish", {}, 1),                                                # refused: syntax error
        call("search_replace", {"old": "BLOCK = = 512", "new": "BLOCK = 512"}, 2),
        call("finish", {}, 3),
    ])
    child, transcript = llm.code(m, SEED, Proposal(**PROPOSAL), lambda s: (True, "ok"))
    assert child == SEED.replace("BLOCK = 256\n", "BLOCK = 512\n")
    assert any("syntax error on line 7" in t["content"] for t in transcript if t["role"] == "tool")

    # a quick check that never passes: the rounds run out and no child is produced
    m = Scripted(script=[call("search_replace", {"old": "NUM_WARPS = 4", "new": "NUM_WARPS = 8"}, 0)]
                 + [call("finish", {}, i) for i in range(1, 4)])
    child, _ = llm.code(m, SEED, Proposal(**PROPOSAL), lambda s: (False, "wrong_output: off by 1"), rounds=4)
    assert child is None and not m.script


class Status(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(f"HTTP {code} from the provider")
        self.status_code = code


def test_retries_back_off_on_transient_errors_only() -> None:
    m = Scripted(script=[Status(429), Status(503), TimeoutError("read timed out"), AIMessage(content="hi")])
    usage = llm.Usage()
    assert llm.invoke_with_retry(m, [], usage, base_s=0).content == "hi"
    assert usage.retries == 3 and usage.calls == 1
    m = Scripted(script=[Status(401)])
    with pytest.raises(llm.ProviderError, match=r"^the model provider failed \(HTTP 401\)"):
        llm.invoke_with_retry(m, [], base_s=0)
    m = Scripted(script=[Status(500)] * 3)
    with pytest.raises(llm.ProviderError, match="after 3 attempts"):
        llm.invoke_with_retry(m, [], attempts=3, base_s=0)


def test_model_specs() -> None:
    assert llm.valid_spec("openai:gpt-4.1") and llm.valid_spec("ollama:qwen2.5-coder:7b")
    assert not llm.valid_spec("gpt-4.1") and not llm.valid_spec("builtin")
    m = Scripted()
    mine = llm.Models(given={"scripted:unit": m})
    assert mine.chat_model("scripted:unit") is m
    with pytest.raises(ValueError, match="provider:model"):
        llm.Models().chat_model("scripted-unit")  # another run's given models are not this one's
    served = llm.Models(base_url="http://127.0.0.1:1/v1")
    c = served.chat_model("openai:some-model")
    assert c.model_name == "some-model" and c.max_retries == 0
    assert served.chat_model("openai:some-model") is c  # one client per model for the run


def test_prices_belong_to_their_run() -> None:
    a, b = llm.Models(prices={"p:m": [1.0, 2.0]}), llm.Models()
    assert a.usage("p:m").price == (1.0, 2.0) and b.usage("p:m").price is None


def test_the_coder_tools_schemas() -> None:
    tools = coder_tools(Workspace("x = 1\n"), lambda s: (True, "ok"))
    schemas = {t.name: sorted(t.args) for t in tools}
    assert schemas == {"view_kernel": ["end", "start"], "search_replace": ["new", "old"], "write_kernel": ["source"],
                       "quick_check": ["shapes"], "finish": []}
    assert all(t.description for t in tools)


def test_every_playbook_entry_cites_a_measurement() -> None:
    """Each entry of prompts/playbook.md names the BENCHMARKS.md row it rests on: [P probe] for a playbook
    probe, [L problem] for a builtin-policy run; every name cited exists in that section."""
    text = prompts.playbook()
    bench = (Path(__file__).resolve().parents[2] / "BENCHMARKS.md").read_text()
    reach = _benchmarks_section(bench, "## The loop", "### The loop's reach and evidence")
    builtin = "#### The builtin policy on the examples and on KernelBench level-1 at real sizes"
    tables = {"P": _benchmarks_section(reach, "#### Playbook probes"), "L": _benchmarks_section(reach, builtin)}
    entries = re.split(r"\n(?=\d+\. )", text)[1:]
    assert len(entries) >= 8
    for e in entries:
        cites = re.findall(r"\[(P|L) ([^\]]+)\]", e)
        assert cites, f"no measurement cited: {e[:80]}"
        for kind, names in cites:
            for name in re.split(r",\s*", names.split(":")[0]):
                row = rf"^\| {re.escape(name)} \(" if kind == "P" else rf"^\| (L\d/)?{re.escape(name)}[ (]"
                assert re.search(row, tables[kind], re.M), \
                    f"{e[:40]}… cites {kind} {name!r}, which BENCHMARKS.md's table does not have"


def _benchmarks_section(text: str, *headings: str) -> str:
    """The text under nested headings of BENCHMARKS.md, each found by its words (BENCHMARKS.md is ordered by topic;
    a trailing "(issue N)" note may follow a heading and is not needed to find it), up to the next heading of the
    same or a higher level."""
    for heading in headings:
        level = len(heading) - len(heading.lstrip("#"))
        found = re.search(rf"^{re.escape(heading)}( \(.*\))?$", text, re.M)
        assert found, f"BENCHMARKS.md has no heading {heading!r}"
        rest = text[found.end():]
        end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
        text = rest[:end.start()] if end else rest
    return text
