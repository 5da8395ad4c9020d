"""Knobs wherever kernels keep them, coupled literals moving together, pair moves, and honest sentences when
there is nothing left to move."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from kernelwright.agents.archive import Archive, Outcome, admit, seed
from kernelwright.agents.builtin import apply_proposal, diagnose, lineage_gains, move_for, move_kind, propose
from kernelwright.agents.schemas import Diagnosis
from kernelwright.agents.moves import (
    Move, PairMove, apply, catalog, category_of, knobs, no_moves_reason, pair_catalog,
)

KERNELS = Path(__file__).resolve().parent / "kernels"
SOFTMAX = (KERNELS / "softmax_launch.py").read_text()
BLOCK = "_row_stats.BLOCK+_normalize.BLOCK"
UNKNOWN = diagnose(None, [])
SPILLS = diagnose(None, [{"name": "k", "compiled": {"spills": 4}}])


def _pair(a: str, b: str) -> str:
    return ",".join(sorted((a, b)))


def _changed(before: str, after: str) -> list[tuple[str, str]]:
    return [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]


# -- launch literals and their coupled literals --------------------------------------------------------------


def test_the_launch_literal_softmax_has_real_knobs() -> None:
    found = knobs(SOFTMAX)
    assert list(found) == [BLOCK, "_row_stats.num_warps", "_normalize.num_warps"]
    block = found[BLOCK]
    assert block.value == 1024 and block.category == "tiling" and block.kind == "launch"
    # its two launch literals, then the three cdiv divisors (n_blocks and both grids)
    assert [s.line for s in block.spans] == [61, 62, 57, 61, 62]
    assert block.coupled == ("triton.cdiv(n_cols, 1024)",) * 3
    assert found["_row_stats.num_warps"].category == "warps" and found["_row_stats.num_warps"].spans[0].line == 61
    assert {m.key for m in catalog(SOFTMAX)} == {
        f"{BLOCK}=512", f"{BLOCK}=2048", "_row_stats.num_warps=2", "_row_stats.num_warps=8",
        "_normalize.num_warps=2", "_normalize.num_warps=8"}


def test_a_block_move_rewrites_the_launch_literals_and_the_coupled_ones_together() -> None:
    move = next(m for m in catalog(SOFTMAX) if m.key == f"{BLOCK}=2048")
    assert move.what == f"{BLOCK} 1024 -> 2048 (with the 1024 in triton.cdiv(n_cols, 1024) (3 places))"
    out = apply(SOFTMAX, move)
    ast.parse(out)
    expected = SOFTMAX
    for old, new in [
        ("n_blocks = triton.cdiv(n_cols, 1024)", "n_blocks = triton.cdiv(n_cols, 2048)"),
        ("_row_stats[(n_rows, triton.cdiv(n_cols, 1024))](x2, m, s, n_cols, BLOCK=1024, num_warps=4)",
         "_row_stats[(n_rows, triton.cdiv(n_cols, 2048))](x2, m, s, n_cols, BLOCK=2048, num_warps=4)"),
        ("_normalize[(n_rows, triton.cdiv(n_cols, 1024))](x2, y, m, s, n_cols, BLOCK=1024, num_warps=4)",
         "_normalize[(n_rows, triton.cdiv(n_cols, 2048))](x2, y, m, s, n_cols, BLOCK=2048, num_warps=4)"),
    ]:
        assert expected.count(old) == 1
        expected = expected.replace(old, new)
    assert out == expected
    assert len(_changed(SOFTMAX, out)) == 3
    assert knobs(out)[BLOCK].value == 2048 and "1024" not in out.split("class ModelNew")[1]


def test_a_warps_move_touches_only_its_launch() -> None:
    out = apply(SOFTMAX, Move("_normalize.num_warps", 4, 8, "warps"))
    assert _changed(SOFTMAX, out) == [(
        "        _normalize[(n_rows, triton.cdiv(n_cols, 1024))](x2, y, m, s, n_cols, BLOCK=1024, num_warps=4)",
        "        _normalize[(n_rows, triton.cdiv(n_cols, 1024))](x2, y, m, s, n_cols, BLOCK=1024, num_warps=8)")]


def test_apply_refuses_a_stale_old_value_and_an_unknown_knob() -> None:
    move = Move(BLOCK, 1024, 2048, "tiling")
    out = apply(SOFTMAX, move)
    with pytest.raises(ValueError, match="is 2048, not 1024"):
        apply(out, move)
    with pytest.raises(KeyError):
        apply(SOFTMAX, Move("_row_stats.num_stages", 2, 3, "pipelining"))


def test_a_second_launch_of_one_kernel_and_launches_of_other_values_stay_apart() -> None:
    src = '''
def f(x, n):
    k[(triton.cdiv(n, 256),)](x, BLOCK_SIZE=256, num_stages=2, lower=3, FLAG=True)
    k[(n // 512,)](x, BLOCK_SIZE=512, num_stages=3)
    j[(triton.cdiv(n, 128),)](x, BLOCK_SIZE=128)
    j[(8,)](x, BLOCK_SIZE=64, EXTRA=triton.next_power_of_2(n))
'''
    found = knobs(src)
    assert list(found) == ["k.BLOCK_SIZE", "k.num_stages", "k#2.BLOCK_SIZE", "k#2.num_stages", "j.BLOCK_SIZE",
                           "j#2.BLOCK_SIZE"]
    assert found["k.BLOCK_SIZE"].coupled == ("triton.cdiv(n, 256)",)
    assert found["k#2.BLOCK_SIZE"].coupled == ("n // 512",)
    assert found["j#2.BLOCK_SIZE"].coupled == ()  # the 8 in its grid is not 64
    assert found["k.num_stages"].category == "pipelining"
    out = apply(src, Move("k#2.BLOCK_SIZE", 512, 1024, "tiling"))
    assert _changed(src, out) == [("    k[(n // 512,)](x, BLOCK_SIZE=512, num_stages=3)",
                                   "    k[(n // 1024,)](x, BLOCK_SIZE=1024, num_stages=3)")]


def test_rounding_terms_and_local_constants_move_with_the_block() -> None:
    src = '''
def forward(x, n):
    BLOCK_N = 128
    grid = ((n + 127) // 128, (n + 128 - 1) // 128)
    k[grid](x, n % 128, BLOCK_N=BLOCK_N)
'''
    (only,) = knobs(src).values()
    assert only.id == "forward.BLOCK_N" and only.kind == "local" and only.value == 128
    out = apply(src, catalog(src)[1])
    assert out == src.replace("128", "256").replace("127", "255")


def test_constexpr_defaults_are_knobs_unless_a_launch_sets_them() -> None:
    src = '''
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr = 1024, SPLIT: tl.constexpr = 4, num: int = 3):
    pass

@triton.jit
def j(x_ptr, n, BLOCK: tl.constexpr = 512):
    pass

@triton.jit
def i(x_ptr, n, BLOCK: tl.constexpr = 64):
    pass

def forward(x, n):
    k[(triton.cdiv(n, 1024),)](x, n)
    j[(triton.cdiv(n, 512),)](x, n, BLOCK=256)
    i[(triton.cdiv(n, 64),)](x, n, 32)
'''
    found = knobs(src)
    assert set(found) == {"k.BLOCK", "k.SPLIT", "j.BLOCK"}  # i's BLOCK is set positionally
    assert found["k.BLOCK"].kind == "constexpr" and found["k.BLOCK"].coupled == ("triton.cdiv(n, 1024)",)
    assert found["j.BLOCK"].kind == "launch" and found["j.BLOCK"].value == 256
    assert found["k.SPLIT"].category == "other" and not any(m.knob == "k.SPLIT" for m in catalog(src))
    out = apply(src, Move("k.BLOCK", 1024, 2048, "tiling"))
    assert _changed(src, out) == [
        ("def k(x_ptr, n, BLOCK: tl.constexpr = 1024, SPLIT: tl.constexpr = 4, num: int = 3):",
         "def k(x_ptr, n, BLOCK: tl.constexpr = 2048, SPLIT: tl.constexpr = 4, num: int = 3):"),
        ("    k[(triton.cdiv(n, 1024),)](x, n)", "    k[(triton.cdiv(n, 2048),)](x, n)")]


AUTOTUNED = '''
import triton
import triton.language as tl

@triton.autotune(configs=[
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8),
], key=["M"])
@triton.jit
def mm(a, b, c, M, BLOCK_M: tl.constexpr = 16, BLOCK_N: tl.constexpr = 16):
    acc = tl.dot(a, b)
'''


def test_autotune_configs_are_knobs_and_pairs_stay_within_one_config() -> None:
    found = knobs(AUTOTUNED)
    assert list(found) == ["mm.cfg0.BLOCK_M", "mm.cfg0.BLOCK_N", "mm.cfg0.num_warps", "mm.cfg0.num_stages",
                           "mm.cfg1.BLOCK_M", "mm.cfg1.BLOCK_N", "mm.cfg1.num_warps"]  # defaults overridden
    assert found["mm.cfg0.BLOCK_N"].min_value == 16  # tl.dot needs 16
    keys = {m.key for m in catalog(AUTOTUNED)}
    assert "mm.cfg0.BLOCK_N=16" in keys and "mm.cfg0.BLOCK_N=64" in keys and "mm.cfg0.num_stages=4" in keys
    out = apply(AUTOTUNED, Move("mm.cfg1.BLOCK_N", 64, 128, "tiling"))
    assert _changed(AUTOTUNED, out) == [
        ('    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8),',
         '    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128}, num_warps=8),')]
    at16 = apply(AUTOTUNED, Move("mm.cfg0.BLOCK_N", 32, 16, "tiling"))
    assert {m.new for m in catalog(at16) if m.knob == "mm.cfg0.BLOCK_N"} == {32}  # never 8
    for pair in pair_catalog(AUTOTUNED):
        assert pair.first.knob.split(".")[1] == pair.second.knob.split(".")[1]
        assert pair.first.category != pair.second.category


def test_module_constants_still_work() -> None:
    src = "BLOCK_N = 1024\nNUM_WARPS = 4\nNUM_STAGES = 2\nGROUP_M = 8\nOTHER = 3\n"
    assert list(knobs(src)) == ["BLOCK_N", "NUM_WARPS", "NUM_STAGES", "GROUP_M", "OTHER"]
    assert knobs(src)["BLOCK_N"].line == 1 and knobs(src)["BLOCK_N"].name == "BLOCK_N"
    assert apply(src, Move("GROUP_M", 8, 16, "grouping")) == src.replace("GROUP_M = 8", "GROUP_M = 16")
    assert [category_of(n) for n in ("num_warps", "NUM_STAGES", "GROUP_M", "XBLOCK", "CHUNK", "k.cfg0.BLOCK_M",
                                     f"{BLOCK}", "OTHER")] == [
        "warps", "pipelining", "grouping", "tiling", "tiling", "tiling", "tiling", "other"]


# -- pair moves ------------------------------------------------------------------------------------------------


def test_pairs_join_different_categories_with_stable_keys() -> None:
    pairs = pair_catalog(SOFTMAX)
    assert len(pairs) == 8  # 2 block moves x 4 warps moves; two warps knobs never pair
    assert all({p.first.category, p.second.category} == {"tiling", "warps"} for p in pairs)
    assert [p.key for p in pairs] == sorted(p.key for p in pairs)
    p = next(p for p in pairs if p.key == _pair("_row_stats.num_warps=8", f"{BLOCK}=2048"))
    out = apply(SOFTMAX, p)
    assert out == apply(apply(SOFTMAX, p.first), p.second)
    assert knobs(out)[BLOCK].value == 2048 and knobs(out)["_row_stats.num_warps"].value == 8
    assert move_kind(p) == "tiling+&warps+"


def test_pairs_are_offered_only_when_plateaued_or_singles_are_exhausted() -> None:
    singles = {m.key for m in catalog(SOFTMAX)}
    for rank in range(len(singles) + 3):
        p = propose(SOFTMAX, UNKNOWN, {}, set(), random.Random(rank), rank=rank)
        assert p is not None and "," not in p.key
    plateau = propose(SOFTMAX, SPILLS, {}, set(), random.Random(0), plateaued=True)
    # spills favour smaller tiles and more warps: the pair does both
    assert plateau is not None and plateau.key in {_pair("_normalize.num_warps=8", f"{BLOCK}=512"),
                                                   _pair("_row_stats.num_warps=8", f"{BLOCK}=512")}
    assert "plateaued" in plateau.why and plateau.category == "tiling"
    exhausted = propose(SOFTMAX, SPILLS, {}, singles, random.Random(0))
    assert exhausted is not None and "," in exhausted.key and "Every single move" in exhausted.why
    child = apply_proposal(SOFTMAX, exhausted)
    assert isinstance(move_for(SOFTMAX, exhausted), PairMove) and len(_changed(SOFTMAX, child)) == 3
    everything = singles | {p.key for p in pair_catalog(SOFTMAX)}
    assert propose(SOFTMAX, SPILLS, {}, everything, random.Random(0)) is None


def test_lineage_gains_read_launch_ids_and_pair_keys() -> None:
    def out(cid: str, speedup: float) -> Outcome:
        return Outcome(child_id=cid, verdict="pass", reason="ok", speedup_vs_eager=speedup, noise_band=0.01,
                       kernels=[], bound="memory")

    arch = seed(Archive(), out("s", 1.0))
    arch, _ = admit(arch, "s", f"{BLOCK}=2048", out("c1", 1.2))
    arch, _ = admit(arch, "s", _pair("_row_stats.num_warps=8", f"{BLOCK}=512"), out("c2", 1.1))
    arch, _ = admit(arch, "s", "an LLM's own key", out("c3", 1.05))
    gains = lineage_gains(arch, "s", lambda h: SOFTMAX)
    assert gains == {"tiling+": [pytest.approx(0.2)], "tiling-&warps+": [pytest.approx(0.1)]}
    # the learned gain of a pair kind lifts that pair above the others once pairs are offered
    p = propose(SOFTMAX, UNKNOWN, {"tiling-&warps+": [0.3]}, set(), random.Random(0), plateaued=True)
    assert p is not None and move_kind(move_for(SOFTMAX, p)) == "tiling-&warps+"


def test_a_kernel_is_read_once_however_many_branches_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every branch of a generation asks for the knobs of every kernel on its lineage (`lineage_gains`): on two
    H200s with 32 branches that was 10 s of AST reading between generations, the GPUs idle. Each source is now
    read once, and each caller still gets a dict of its own."""
    from kernelwright.agents import moves

    reads: list[str] = []
    real = moves._read_knobs
    monkeypatch.setattr(moves, "_read_knobs", lambda src: reads.append(src) or real(src))
    moves._knobs.cache_clear()
    source = SOFTMAX + "\n# read once\n"
    first = knobs(source)
    first.pop(BLOCK)  # a caller's own copy
    for _ in range(32):
        assert list(knobs(source)) == [BLOCK, "_row_stats.num_warps", "_normalize.num_warps"]
    assert reads == [source]


# -- the strategist end to end, and when nothing is left -----------------------------------------------------


def test_the_builtin_strategist_moves_the_launch_literal_softmax() -> None:
    p = propose(SOFTMAX, UNKNOWN, {}, set(), random.Random(0))
    assert p is not None and p.key in {m.key for m in catalog(SOFTMAX)}
    child = apply_proposal(SOFTMAX, p)
    assert child != SOFTMAX and ast.parse(child)
    memory = Diagnosis(bottleneck="memory", evidence=[], summary="bandwidth-bound")  # prefers larger blocks
    p = propose(SOFTMAX, memory, {}, set(), random.Random(0))
    assert p is not None and p.key == f"{BLOCK}=2048" and p.category == "tiling"
    assert p.what.startswith(f"{BLOCK} 1024 -> 2048 (with the 1024 in triton.cdiv")


def test_no_moves_reason_for_a_kernel_without_knobs() -> None:
    wide = '''
import triton
import triton.language as tl

@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    pass

def forward(x, y, n_cols):
    softmax_kernel[(x.numel() // n_cols,)](x, y, n_cols, BLOCK=triton.next_power_of_2(n_cols))
'''
    assert knobs(wide) == {} and catalog(wide) == [] and propose(wide, UNKNOWN, {}, set(), random.Random(0)) is None
    why = no_moves_reason(wide, set())
    assert "nothing to tune" in why and "triton.next_power_of_2(n)" in why and "language-model" in why
    assert "every move" not in why.lower() and why.count(". ") == 0 and why.endswith(".")
    assert "OTHER=3 (other)" in no_moves_reason("OTHER = 3\n", set())
    assert "does not parse" in no_moves_reason("def (", set())


def test_no_moves_reason_for_an_exhausted_kernel() -> None:
    singles = {m.key for m in catalog(SOFTMAX)}
    pairs = {p.key for p in pair_catalog(SOFTMAX)}
    why = no_moves_reason(SOFTMAX, singles | pairs)
    assert why.startswith("Every move the builtin policy has for this kernel was tried")
    assert "6 single moves and 8 pair moves" in why and BLOCK in why and "_normalize.num_warps" in why
    assert "2 of 6 single moves and 8 of 8 pair moves" in no_moves_reason(SOFTMAX, singles - {
        f"{BLOCK}=512", "_normalize.num_warps=2"})


# -- the real verifier -----------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_the_softmax_and_its_moved_block_pass_the_verifier_and_an_uncoupled_edit_does_not() -> None:
    from kernelwright.evaluators import EvalPolicy, Evaluator, load_problem

    bigger = apply(SOFTMAX, Move(BLOCK, 1024, 2048, "tiling"))
    uncoupled = SOFTMAX.replace("BLOCK=1024", "BLOCK=2048")  # grids and buffers still sized for 1024
    with Evaluator(load_problem(KERNELS / "softmax_problem.py"), "cpu",
                   EvalPolicy(trials=1, spares=0, compile_mode=None)) as ev:
        for src in (SOFTMAX, bigger):
            r = ev.evaluate(src)
            assert r.verdict == "pass", f"{r.reason}: {r.detail}"
        bad = ev.evaluate(uncoupled)
    assert bad.verdict == "fail", f"{bad.reason}: {bad.detail}"
