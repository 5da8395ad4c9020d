"""The coder's quick check at shape variants (issue 23, item 6), through the real evaluator in Triton's
interpreter: a kernel that assumes its size is a multiple of its block passes at the problem's own shape (a
multiple) and fails at the odd and tail variants; the honest masked kernel passes everywhere. A draft that is only
checked is not stored as a run kernel, but its verdict is, and the verifier reuses it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from langchain_core.messages import AIMessage

from kernelwright.agents import llm
from kernelwright.agents.roles import quick_check
from kernelwright.agents.schemas import Proposal
from kernelwright.tools.coding import Workspace, coder_tools
from kernelwright.tools.evaluation import Evaluations
from kernelwright.tools.runstore import Run, RunStore, kernel_hash

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agents"))
from scripted import PROPOSAL, Scripted  # noqa: E402

os.environ.setdefault("TRITON_INTERPRET", "1")

# own size 8 x 2048 = 16384, a multiple of the kernels' block (1024); the variants: small 8 x 512 (still a
# multiple), odd 7 x 385, tail 8 x 1061 (1024 + 37)
PROBLEM = '''import torch
import torch.nn as nn

batch_size = 8
dim = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

KERNEL = '''import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def relu2_kernel(x, o, n, BLOCK: tl.constexpr):
    """o = relu(x) * 2"""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    {body}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu2_kernel[({grid},)](x, out, n, BLOCK=BLOCK)
        return out
'''
HONEST = KERNEL.format(body="m = offs < n\n    tl.store(o + offs, tl.maximum(tl.load(x + offs, mask=m), 0.0) * 2.0, mask=m)",
                       grid="triton.cdiv(n, BLOCK)")
# assumes n is a multiple of BLOCK: whole blocks only, no mask; a ragged last block is never computed
WHOLE_BLOCKS = KERNEL.format(body="tl.store(o + offs, tl.maximum(tl.load(x + offs), 0.0) * 2.0)",
                             grid="n // BLOCK")


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Run, Evaluations, SimpleNamespace]]:
    run = RunStore(tmp_path_factory.mktemp("runs")).create("relu2.py", PROBLEM)
    evaluations = Evaluations(run, trials=1)
    ctx = SimpleNamespace(config=SimpleNamespace(on_cpu=True, device_for=lambda branch: "cpu"),
                          evaluations=evaluations, run=run)
    yield run, evaluations, ctx
    evaluations.close()


def test_the_variants_are_built_from_the_size_constants(checked: tuple[Run, Evaluations, SimpleNamespace]) -> None:
    _, evaluations, _ = checked
    shapes, dropped = evaluations.variants()
    assert {n: s.sizes for n, s in shapes.items()} == {
        "small": {"batch_size": 8, "dim": 512}, "odd": {"batch_size": 7, "dim": 385},
        "tail": {"batch_size": 8, "dim": 1061}}
    assert dropped == {}


def test_shape_variants_catch_a_kernel_that_assumes_whole_blocks(
        checked: tuple[Run, Evaluations, SimpleNamespace]) -> None:
    _, _, ctx = checked
    check = quick_check(ctx)  # type: ignore[arg-type]
    ok, msg = check(WHOLE_BLOCKS)
    assert ok, msg  # the problem's own shape is a multiple of the block: nothing shows there
    ok, msg = check(WHOLE_BLOCKS, ("small", "odd", "tail"))
    assert not ok
    lines = msg.splitlines()
    assert lines[0].startswith("problem shapes: pass")
    assert lines[1] == "small (batch_size=8, dim=512): pass"
    # the ragged last block was never computed: its elements still hold the poison of a fresh allocation
    assert lines[2].startswith("odd (batch_size=7, dim=385): fail: stale_output: ")
    assert "647 of 2695 elements were never written" in lines[2]
    assert lines[3].startswith("tail (batch_size=8, dim=1061): fail: stale_output: ")
    assert "296 of 8488 elements were never written" in lines[3]


def test_an_honest_masked_kernel_passes_every_variant(checked: tuple[Run, Evaluations, SimpleNamespace]) -> None:
    _, _, ctx = checked
    ok, msg = quick_check(ctx)(HONEST, ("small", "odd", "tail"))  # type: ignore[arg-type]
    assert ok, msg
    assert msg.splitlines()[1:] == ["small (batch_size=8, dim=512): pass", "odd (batch_size=7, dim=385): pass",
                                    "tail (batch_size=8, dim=1061): pass"]


def test_the_tool_takes_shape_names_and_finish_needs_only_the_problem_shapes(
        checked: tuple[Run, Evaluations, SimpleNamespace]) -> None:
    _, _, ctx = checked
    ws = Workspace(WHOLE_BLOCKS)
    tools = {t.name: t for t in coder_tools(ws, quick_check(ctx))}  # type: ignore[arg-type]
    out = tools["quick_check"].invoke({"shapes": ["odd"]})
    assert out.startswith("fail: problem shapes: pass") and "\nodd (batch_size=7, dim=385): fail: stale_output" in out
    assert tools["quick_check"].invoke({"shapes": ["huge"]}) == \
        "error: unknown shape 'huge'; the shapes are 'small', 'odd', 'tail'"
    alone = tools["quick_check"].invoke({"shapes": "odd"})  # one name alone is taken as a list of one
    assert alone.splitlines()[1].startswith("odd (batch_size=7, dim=385): fail: stale_output"), alone
    assert tools["quick_check"].invoke({}).startswith("pass: ")
    assert tools["finish"].invoke({}) == "done" and ws.finished


def test_a_cpu_quick_check_stores_no_kernel_but_its_verdict_is_reused(
        checked: tuple[Run, Evaluations, SimpleNamespace], monkeypatch: pytest.MonkeyPatch) -> None:
    run, evaluations, ctx = checked
    draft = HONEST.replace("BLOCK = 1024", "BLOCK = 512")
    before = sorted(p.name for p in (run.path / "kernels").iterdir())
    ok, msg = quick_check(ctx)(draft)  # type: ignore[arg-type]
    assert ok, msg
    assert sorted(p.name for p in (run.path / "kernels").iterdir()) == before == []
    h = kernel_hash(draft)
    assert (run.path / "evals" / f"{h}.json").exists()
    # the verifier judges the same source as the child: the cached verdict, nothing run again
    monkeypatch.setattr(evaluations, "_judged", lambda *a: pytest.fail("judged again"))
    got, result = evaluations.evaluate(draft, "cpu")
    assert got == h and result.verdict == "pass"
    assert (run.path / "kernels" / f"{h}.py").read_text() == draft  # stored once it is a candidate


def test_variants_are_not_run_where_the_device_is_judged_elsewhere(tmp_path: Path) -> None:
    run = RunStore(tmp_path).create("relu2.py", PROBLEM)
    evaluations = Evaluations(run, hosts=True)
    try:
        (v,) = evaluations.quick_variants(HONEST, "cuda:1", ["odd"])
        assert v.result is None and v.line().startswith("odd: not run: shape variants are checked only where")
    finally:
        evaluations.close()


def _reply(*calls: tuple[str, dict[str, object]]) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": f"{n}-{i}", "type": "tool_call"}
                                             for i, (n, a) in enumerate(calls)],
                     usage_metadata={"input_tokens": 10, "output_tokens": 1, "total_tokens": 11})


def test_an_edit_a_quick_check_and_finish_in_one_reply_run_in_order() -> None:
    """One reply: edit, quick_check with shapes, finish; the calls run in the order written (the check sees the
    edit, finish reuses its verdict) and the coder is done after one model call. A call after finish() in the
    same reply is not run: the kernel returned is the one finish() passed."""
    seen: list[tuple[str, tuple[str, ...]]] = []

    def check(source: str, shapes: tuple[str, ...] = ()) -> tuple[bool, str]:
        seen.append((source, shapes))
        return True, "ok"

    edited = HONEST.replace("BLOCK = 1024", "BLOCK = 512")
    m = Scripted(script=[_reply(("search_replace", {"old": "BLOCK = 1024", "new": "BLOCK = 512"}),
                                ("quick_check", {"shapes": ["odd"]}), ("finish", {}),
                                ("write_kernel", {"source": "broken"}))])
    child, transcript = llm.code(m, HONEST, Proposal(**PROPOSAL), check)
    assert child == edited and not m.script  # one model call
    replies = [t["content"] for t in transcript if t["role"] == "tool"]
    assert replies == ["replaced 1 occurrence", "pass: ok", "done",
                       "error: finish() was already called in this reply; this call was not run"]
    assert seen == [(edited, ("odd",)), (edited, ())]


def test_on_a_gpu_the_quick_check_shows_the_rough_time_and_runs_variants_only_when_the_problem_shapes_pass() -> None:
    """The GPU path's message (the evaluation service faked: no GPU here): the worker's rough time is shown
    with its label; variants are not run when the problem's own shapes fail."""
    from kernelwright.evaluators import Check, EvalResult

    rough = ("rough time at the problem's size: 0.25 ms (median of 3 forwards after 2 warm-ups, CUDA events; "
             "rough, one measurement, never used to admit anything)")
    asked: list[tuple[str, ...]] = []

    class Fake:
        def quick(self, source: str, device: str) -> EvalResult:
            if "bad" in source:
                return EvalResult(verdict="fail", reason="wrong_output", detail="off by one", device=device)
            return EvalResult(verdict="pass", reason="ok", detail="correct on 1 trials over 1 input families",
                              families=["base"], device=device,
                              checks=[Check(name="rough_time", outcome="info", detail=rough)])

        def quick_variants(self, source: str, device: str, names: tuple[str, ...]) -> list[object]:
            asked.append(tuple(names))
            return []

    ctx = SimpleNamespace(config=SimpleNamespace(on_cpu=False, device_for=lambda b: "cuda:0"), evaluations=Fake())
    ok, msg = quick_check(ctx)("good")  # type: ignore[arg-type]
    assert ok and msg.endswith(f"(quick check); {rough}")
    ok, msg = quick_check(ctx)("bad", ("odd",))  # type: ignore[arg-type]
    assert not ok and msg == ("problem shapes: fail: wrong_output: off by one\n"
                              "odd: not run (the problem's own shapes fail)")
    assert asked == []


def test_on_a_real_gpu_the_quick_check_times_roughly_and_catches_the_tail(tmp_path: Path) -> None:
    """GPU only (skipped here): the worker's rough time is a check of outcome info, the verdict has no Timing,
    and the odd variant catches the kernel that assumes whole blocks."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    run = RunStore(tmp_path).create("relu2.py", PROBLEM)
    evaluations = Evaluations(run, trials=1)
    try:
        result = evaluations.quick(HONEST, "cuda:0")
        assert result.verdict == "pass" and result.timing is None, result.detail
        (rough,) = [c for c in result.checks if c.name == "rough_time"]
        assert rough.outcome == "info" and "ms (median of 3 forwards" in rough.detail and "rough" in rough.detail
        (odd,) = evaluations.quick_variants(WHOLE_BLOCKS, "cuda:0", ["odd"])
        assert odd.result is not None and odd.result.reason == "stale_output", odd.line()
        assert not [c for c in odd.result.checks if c.name == "rough_time"]  # variants are never timed
    finally:
        evaluations.close()


def test_the_quick_check_names_the_sizes_no_variant_changes(tmp_path: Path) -> None:
    """A size only get_init_inputs() reads (the weights' shapes: KernelBench's hidden_size) is varied by the odd
    variant alone: a reply without it says so, so that a ragged path along it is not taken for tested (a model
    asked, on level2/56); with it, the size is made odd and nothing is left unvaried."""
    problem = PROBLEM.replace("dim = 2048\n", "dim = 2048\nhidden = 24\n").replace(
        "    def __init__(self):\n        super().__init__()\n",
        "    def __init__(self, hidden):\n        super().__init__()\n        self.hidden = hidden\n").replace(
        "def get_init_inputs():\n    return []", "def get_init_inputs():\n    return [hidden]")
    run = RunStore(tmp_path).create("relu2h.py", problem)
    evaluations = Evaluations(run, trials=1)
    ctx = SimpleNamespace(config=SimpleNamespace(on_cpu=True, device_for=lambda branch: "cpu"),
                          evaluations=evaluations, run=run)
    honest = HONEST.replace("def __init__(self):", "def __init__(self, hidden):")
    try:
        ok, msg = quick_check(ctx)(honest, ("small",))  # type: ignore[arg-type]
        ok_odd, msg_odd = quick_check(ctx)(honest, ("odd",))  # type: ignore[arg-type]
    finally:
        evaluations.close()
    assert ok, msg
    assert msg.splitlines()[1:] == ["small (batch_size=8, dim=512): pass", "not varied by any shape: hidden=24"]
    assert ok_odd, msg_odd
    assert msg_odd.splitlines()[1:] == ["odd (batch_size=7, dim=385, hidden=19): pass"], msg_odd
    # the problem without such a size says nothing of it
    ok, msg = quick_check(SimpleNamespace(config=ctx.config, evaluations=Evaluations(
        RunStore(tmp_path / "b").create("relu2.py", PROBLEM), trials=1), run=None))(HONEST, ("small",))  # type: ignore[arg-type]
    assert ok and "not varied" not in msg, msg
