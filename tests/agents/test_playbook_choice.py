"""What the strategist and the coder are shown, from real model-driven GPU runs (issue 23, BENCHMARKS's relay runs):
the playbook's entries chosen by what they apply to (a persistent parent is not offered the split of starved rows;
a softmax's max pass is offered only where the reference has one; a GEMM with a reduction after it is shown its
GEMM's entries and at most one of the reduction's), and the quick check's explanations said once a conversation."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from langchain_core.messages import ToolMessage

from kernelwright.agents import llm
from kernelwright.agents.playbook import choose_shipped, playbook_for, shipped
from kernelwright.agents.roles import quick_check
from kernelwright.agents.schemas import Diagnosis, Proposal
from kernelwright.evaluators.variants import Shape
from kernelwright.tools.coding import Workspace, coder_tools
from kernelwright.tools.evaluation import VariantCheck

sys.path.insert(0, str(Path(__file__).parent))
from scripted import PROPOSAL, Scripted, call  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SEED = (ROOT / "tests" / "graphs" / "add_seed.py").read_text()
H200 = "NVIDIA H200"
SOFTMAX = "class Model(nn.Module):\n    def forward(self, x):\n        return torch.softmax(x, dim=1)\n"
L2_NORM = ("class Model(nn.Module):\n    def forward(self, x):\n"
           "        return x / torch.norm(x, p=2, dim=1, keepdim=True)\n")
# a GroupNorm after an activation written with exp (a level2 problem's shape): a row reduction with no max pass
GROUP_NORM_EXP = ("class Model(nn.Module):\n    def forward(self, x):\n        x = x * (1 - torch.exp(-x))\n"
                  "        return self.gn(x)\n")
STARVED = Diagnosis(bottleneck="occupancy", summary="few programs, long rows: the grid starves the GPU",
                    evidence=["grid of 16 programs on 132 SMs", "achieved occupancy 11 %", "dram throughput 9 %"])
TWO_PASSES = Diagnosis(bottleneck="memory", summary="the kernel reads each row twice: a max pass, then a sum pass",
                       evidence=["dram bytes 2.0x the problem's", "grid of 918000 programs"])

# the L2 norm's first kernel of the H200 relay run (its launch: min(rows, SMs) programs walking the rows)
PERSISTENT_L2 = '''
@triton.jit
def l2norm_rows_kernel(x_ptr, out_ptr, M, N, stride_xm, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    for row in range(pid, M, nprog):
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, N, BLOCK):
            acc += tl.load(x_ptr + row * stride_xm + start + cols, mask=start + cols < N, other=0.0)
'''
# the starved layer norm's parent: one program per row, a loop over the row's chunks
ONE_PROGRAM_A_ROW = '''
@triton.jit
def ln_kernel(x_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    for start in range(0, N, BLOCK):
        v = tl.load(x_ptr + row * N + start + cols, mask=start + cols < N, other=0.0)
'''


def _ids(kinds: list[str], diagnosis: Diagnosis | None, **kw: Any) -> list[str]:
    return [e.id for e in choose_shipped(kinds, diagnosis, 9, **kw)]


def test_a_persistent_parent_is_not_offered_the_split_of_starved_rows() -> None:
    """39_L2Norm on an H200: 132 programs on 132 SMs walking 32768 rows were offered `split-rows`, an entry for a
    grid of a few programs each reducing one very long row. A parent with as few programs, one row each, still is."""
    persistent = _ids(["row_reduction"], STARVED, source=L2_NORM, programs=132, sms=132, parent_source=PERSISTENT_L2)
    assert "split-rows" not in persistent and persistent, persistent
    starved = _ids(["row_reduction"], STARVED, source=L2_NORM, programs=16, sms=132, parent_source=ONE_PROGRAM_A_ROW)
    assert starved[0] == "split-rows"
    # more programs than SMs: not starved, whatever the kernel
    assert "split-rows" not in _ids(["row_reduction"], STARVED, source=L2_NORM, programs=918_000, sms=132,
                                    parent_source=ONE_PROGRAM_A_ROW)


def test_the_max_pass_entry_only_where_the_reference_has_a_max_pass() -> None:
    """35_GroupNorm_: a grid of 918k programs with no max pass was offered a softmax's one-pass statistics. A
    reference that calls exp (a swish, an ELU) before a group norm has no max pass either; a softmax, a
    log-softmax, a log-sum-exp and attention do."""
    assert "online-stats" not in _ids(["row_reduction"], TWO_PASSES, source=GROUP_NORM_EXP, programs=918_000, sms=132)
    assert "online-stats" not in _ids(["row_reduction"], TWO_PASSES, source=L2_NORM, programs=918_000, sms=132)
    for src in (SOFTMAX, SOFTMAX.replace("torch.softmax", "torch.log_softmax"),
                SOFTMAX.replace("torch.softmax(x, dim=1)", "torch.logsumexp(x, dim=1)"),
                "    return F.scaled_dot_product_attention(q, k, v)\n",
                "    return torch.nn.functional.cross_entropy(predictions, targets)\n"):  # level1/95's log-softmax
        assert "online-stats" in _ids(["row_reduction"], TWO_PASSES, source=src, programs=918_000, sms=132), src
    text = playbook_for(["row_reduction"], TWO_PASSES, H200, source=GROUP_NORM_EXP, programs=918_000, sms=132)
    assert "[online-stats]" not in text


def test_a_gemm_with_a_reduction_after_it_is_shown_its_gemm_entries_and_one_of_the_reduction() -> None:
    """level2/37_Matmul_Swish_Sum_GroupNorm (kinds matmul and row_reduction): the softmax/layer-norm entries must
    not crowd out the GEMM's. The GEMM's entries come first; at most `EPILOGUE_LIMIT` (one) entry only for the
    reduction is shown, and only when the diagnosis names what it answers."""
    # a diagnosis that names several row-reduction entries' words (grid, occupancy, two passes, block, warps)
    wordy = Diagnosis(bottleneck="memory", summary="the group norm epilogue reads the row twice: a max pass, a sum "
                      "pass; few programs, low occupancy",
                      evidence=["grid of 64 programs, fewer programs than SMs", "achieved occupancy 12 %",
                                "block_m 8 rows per program, 8 warps", "dram bytes 2x, re-read"])
    chosen = choose_shipped(["matmul", "row_reduction"], wordy, 99)
    gemm = [e for e in chosen if "matmul" in e.kinds]
    others = [e for e in chosen if "matmul" not in e.kinds]
    assert len(gemm) == sum(1 for e in shipped() if "matmul" in e.kinds)
    assert len(others) == 1 and chosen[-1] is others[0], [e.id for e in chosen]
    # alone, the same row reduction is shown several of its entries
    assert sum(1 for i in _ids(["row_reduction"], wordy) if i in {e.id for e in shipped()
                                                                   if "matmul" not in e.kinds}) > 1
    # the default four slots go to the GEMM
    assert all("matmul" in e.kinds for e in choose_shipped(["matmul", "row_reduction"], wordy))


def _fake_ctx(asked: list[tuple[str, ...]]) -> SimpleNamespace:
    """A run's context whose evaluations pass every draft at the problem's shapes (which give no get_test_inputs)
    and at every variant, with a weight size no variant changes: the replies a coder reads, without an evaluator."""
    def result() -> SimpleNamespace:
        return SimpleNamespace(verdict="pass", reason="ok", detail="correct on 1 trials over 1 input families",
                               families=["base"], checks=[], kernels=[])

    def variants(source: str, device: str, shapes: tuple[str, ...]) -> list[VariantCheck]:
        asked.append(tuple(shapes))
        return [VariantCheck(Shape(n, {"batch_size": 8, "dim": 511}, 4088), result()) for n in shapes]

    evaluations = SimpleNamespace(evaluate=lambda source, device, store=False: (None, result()),
                                  quick_variants=variants, fixed_sizes=lambda: {"hidden": 24})
    return SimpleNamespace(config=SimpleNamespace(on_cpu=True, device_for=lambda branch: "cpu"),
                           evaluations=evaluations, run=None)


def test_the_coders_later_turns_do_not_explain_the_quick_check_again() -> None:
    """39_L2Norm's relay model read the quick check's explanations of what its shapes cover in every reply. They
    are said once a conversation: why only the problem's own shapes ran in the first reply, what a size no variant
    changes is in the tool's description (which carries how the variants are made); later replies say what ran.
    The prompt does not restate the variants' description."""
    asked: list[tuple[str, ...]] = []
    seed = SEED
    m = Scripted(script=[call("quick_check", {"shapes": ["small", "tail"]}, 0),
                         call("search_replace", {"old": "BLOCK = 256\n", "new": "BLOCK = 512\n"}, 1),
                         call("quick_check", {"shapes": ["small", "tail"]}, 2),
                         call("quick_check", {"shapes": ["odd"]}, 3),
                         call("finish", {}, 4)])
    check = quick_check(_fake_ctx(asked))  # type: ignore[arg-type]
    child, _ = llm.code(m, seed, Proposal(**PROPOSAL), check, problem="problem source")
    assert child == SEED.replace("BLOCK = 256\n", "BLOCK = 512\n")
    assert asked == [("small", "tail"), ("small", "tail"), ("odd",)]
    last = m.seen[-1]
    replies = [str(x.content) for x in last if isinstance(x, ToolMessage) and x.name == "quick_check"]
    assert len(replies) == 3 and all(r.startswith("pass: problem shapes: pass") for r in replies), replies
    every = "\n".join(str(x.content) for x in last)
    assert every.count("it gives no get_test_inputs)") == 1, replies  # the first reply's
    assert "(only the problem's own shapes)" in replies[1] and "(only the problem's own shapes)" in replies[2]
    assert replies[1].count("not varied by any shape: hidden=24") == 1 and "get_init_inputs" not in replies[1]
    # where it is said instead: the tool's description, once per request, not in the messages
    (qc,) = [t for t in coder_tools(Workspace(seed), lambda s, shapes=(): (True, "")) if t.name == "quick_check"]
    assert "not varied by any shape" in qc.description and "get_init_inputs reads" in qc.description
    for said in ("a multiple of 1024 plus 37", "not varied by any shape: NAME=V"):
        assert said in qc.description and said not in every
