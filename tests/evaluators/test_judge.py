"""The reply judge (`evaluators/judge.py`) on hand-built replies: each rule fires with its reason and a
detail that says what happened, and an honest reply passes untouched.

No workers, no reference, no Triton: the headers are what a worker would send, the tensors small CPU
tensors. The adversarial suite (test_adversarial.py) shows real candidates reach these same verdicts.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernelwright.evaluators.judge import (
    KIND_REASON, Reject, compare_all, judge_coverage, judge_inputs, judge_launches, judge_ok, judge_outputs,
    judge_processes, judge_recheck, judge_record, measure_coverage, strides_ok,
    timing_summary,
)
from kernelwright.evaluators.result import Reason, Timing
from kernelwright.evaluators.timing import Samples

CPU = torch.device("cpu")


def rejected(fn: Any, *args: Any, **kwargs: Any) -> Reject:
    with pytest.raises(Reject) as info:
        fn(*args, **kwargs)
    return info.value


# -- the worker's own verdict on a request ----------------------------------------------------------------


def test_ok_reply_passes() -> None:
    judge_ok({"ok": True}, "forward", "trial 1/5 (base)")


@pytest.mark.parametrize("kind", sorted(KIND_REASON))
def test_failure_kinds_become_their_reasons(kind: str) -> None:
    r = rejected(judge_ok, {"ok": False, "kind": kind, "detail": "boom"}, "forward", "trial 2/5 (base)")
    assert r.reason == KIND_REASON[kind]
    assert r.detail == "trial 2/5 (base): boom"
    assert r.check == "forward"


def test_unknown_or_missing_kind_is_a_runtime_error() -> None:
    assert rejected(judge_ok, {"ok": False, "kind": "weird", "detail": "x"}, "forward", "t").reason \
        == Reason.RUNTIME_ERROR
    assert rejected(judge_ok, {"detail": "x"}, "forward", "t").reason == Reason.RUNTIME_ERROR


def test_load_failure_detail_has_no_label() -> None:
    r = rejected(judge_ok, {"ok": False, "kind": "import", "detail": "SyntaxError: bad"}, "load")
    assert (r.reason, r.detail, r.check) == (Reason.COMPILE_ERROR, "SyntaxError: bad", "load")
    r = rejected(judge_ok, {"ok": False, "kind": "missing_model_new"}, "load")
    assert (r.reason, r.detail) == (Reason.MISSING_MODEL_NEW, "")


# -- what the guards recorded -----------------------------------------------------------------------------


def test_clean_record_passes() -> None:
    judge_record({"ok": True, "tampered": [], "violations": [], "threads": 0, "ops": {}}, "load")
    judge_record({}, "load")


def test_tampering() -> None:
    names = [f"fn{i}" for i in range(9)]
    r = rejected(judge_record, {"tampered": names, "violations": ["x"], "ops": {"add": 1}}, "trial 1/5 (base)")
    assert (r.reason, r.check) == (Reason.TAMPERING, "tampering")  # tampering is reported first
    assert r.detail.startswith("trial 1/5 (base): the candidate replaced harness functions: fn0, fn1")
    assert "fn5" in r.detail and "fn6" not in r.detail  # at most six named


def test_forbidden_call() -> None:
    r = rejected(judge_record, {"violations": [f"open('/etc/passwd{i}')" for i in range(7)], "ops": {"add": 1}},
                 "load")
    assert (r.reason, r.check) == (Reason.FORBIDDEN_CALL, "forbidden_calls")
    assert "load: the candidate attempted: open('/etc/passwd0'); open('/etc/passwd1')" in r.detail
    assert "passwd4" in r.detail and "passwd5" not in r.detail  # at most five shown


def test_threads_left_running() -> None:
    r = rejected(judge_record, {"threads": 2}, "re-read")
    assert (r.reason, r.check) == (Reason.FORBIDDEN_CALL, "threads")
    assert r.detail == "re-read: the candidate left 2 extra thread(s) running"
    judge_record({"threads": None}, "re-read")  # a worker that could not count: nothing to hold against it


def test_forbidden_op_names_the_ops_most_frequent_first() -> None:
    ops = {"add.Tensor": 2, "mm.default": 7, "relu.default": 4}
    r = rejected(judge_record, {"ops": ops}, "trial 3/5 (ones)")
    assert (r.reason, r.check) == (Reason.FORBIDDEN_OP, "ops")
    assert "ModelNew.forward ran PyTorch compute ops (aten.mm.default×7, aten.relu.default×4, aten.add.Tensor×2)" \
        in r.detail
    assert "outside Triton kernels" in r.detail


def test_stray_processes() -> None:
    judge_processes([], "load")
    r = rejected(judge_processes, [4242, 4243], "trial 1/5 (base)")
    assert (r.reason, r.check) == (Reason.FORBIDDEN_CALL, "processes")
    assert "started 2 process(es) that are still running" in r.detail


def test_no_triton_launch() -> None:
    judge_launches({"launches": {"k": {"count": 1}}}, "t")
    for header in ({}, {"launches": {}}):
        r = rejected(judge_launches, header, "trial 1/5 (base)")
        assert (r.reason, r.check) == (Reason.NO_CUSTOM_KERNEL, "triton_launch")
        assert "launched no Triton kernel" in r.detail


# -- outputs ----------------------------------------------------------------------------------------------


def meta_of(t: torch.Tensor, **over: Any) -> dict[str, Any]:
    """What a worker says about an output tensor."""
    m = {"type": "torch.Tensor", "device": str(t.device), "dtype": str(t.dtype).removeprefix("torch."),
         "shape": list(t.shape), "stride": list(t.stride()), "aliases": []}
    m.update(over)
    return m


def ref_of(t: torch.Tensor) -> dict[str, Any]:
    """The reference's metadata for an output (Trial.out_meta)."""
    return {"dtype": t.dtype, "shape": list(t.shape), "stride": list(t.stride())}


def test_honest_outputs_pass() -> None:
    a, b = torch.zeros(4, 8), torch.zeros(3, dtype=torch.int64)
    judge_outputs({"outputs": [meta_of(a), meta_of(b)]}, [a, b], [ref_of(a), ref_of(b)], CPU, "t")


def test_output_count() -> None:
    a = torch.zeros(4)
    r = rejected(judge_outputs, {"outputs": [meta_of(a)]}, [a], [ref_of(a), ref_of(a)], CPU, "trial 1/5 (base)")
    assert (r.reason, r.check) == (Reason.BAD_OUTPUT, "outputs")
    assert r.detail == "trial 1/5 (base): forward returned 1 output(s); the reference returns 2"
    r = rejected(judge_outputs, {}, [], [ref_of(a)], CPU, "t")
    assert "returned 0 output(s)" in r.detail


def test_not_a_plain_tensor() -> None:
    a = torch.zeros(4)
    r = rejected(judge_outputs, {"outputs": [{"type": "mylib.LazyTensor"}]}, [], [ref_of(a)], CPU, "t")
    assert (r.reason, r.check) == (Reason.BAD_OUTPUT, "outputs")
    assert "t, output 0: forward returned a mylib.LazyTensor, not a plain torch.Tensor" in r.detail


def test_wrong_device() -> None:
    a = torch.zeros(4)
    r = rejected(judge_outputs, {"outputs": [meta_of(a, device="cuda:0")]}, [a], [ref_of(a)], CPU, "t")
    assert r.reason == Reason.WRONG_DEVICE
    assert "the output is on cuda:0, the inputs on cpu" in r.detail
    cuda = torch.device("cuda")  # "cuda" and "cuda:0" are the same device
    judge_outputs({"outputs": [meta_of(a, device="cuda:0")]}, [a], [ref_of(a)], cuda, "t")
    r = rejected(judge_outputs, {"outputs": [meta_of(a, device="cuda:1")]}, [a], [ref_of(a)], cuda, "t")
    assert r.reason == Reason.WRONG_DEVICE


def test_wrong_dtype() -> None:
    a = torch.zeros(4)
    r = rejected(judge_outputs, {"outputs": [meta_of(a, dtype="float16")]}, [a], [ref_of(a)], CPU, "t")
    assert (r.reason, r.check) == (Reason.WRONG_DTYPE, "outputs")
    assert r.detail == "t, output 0: dtype float16, expected float32"


def test_wrong_shape() -> None:
    a = torch.zeros(4, 8)
    r = rejected(judge_outputs, {"outputs": [meta_of(a, shape=[8, 4], stride=[4, 1])]}, [a], [ref_of(a)], CPU, "t")
    assert r.reason == Reason.WRONG_SHAPE
    assert r.detail == "t, output 0: shape (8, 4), expected (4, 8)"


def test_wrong_strides() -> None:
    a = torch.zeros(4, 8)
    r = rejected(judge_outputs, {"outputs": [meta_of(a, stride=[1, 4])]}, [a], [ref_of(a)], CPU, "t")
    assert r.reason == Reason.WRONG_STRIDES
    assert r.detail == "t, output 0: strides (1, 4), expected (8, 1) (or contiguous)"


def test_strides_rule() -> None:
    ref_t = {"stride": [1, 4]}  # the reference returns a transposed (column-major) 4x8
    assert strides_ok([4, 8], [1, 4], ref_t)  # the reference's own layout
    assert strides_ok([4, 8], [8, 1], ref_t)  # contiguous is always fine
    assert not strides_ok([4, 8], [16, 1], ref_t)  # padded rows: neither
    assert strides_ok([1, 8], [999, 1], {"stride": [8, 1]})  # a size-1 dimension may have any stride
    assert strides_ok([0, 3], [3, 1], {"stride": [3, 1]})


def test_aliased_output() -> None:
    a = torch.zeros(4)
    r = rejected(judge_outputs, {"outputs": [meta_of(a, aliases=["input 0", "parameter weight"])]}, [a], [ref_of(a)],
                 CPU, "t")
    assert (r.reason, r.check) == (Reason.ALIASED_OUTPUT, "aliasing")
    assert "shares memory with input 0, parameter weight" in r.detail


def test_shared_outputs_must_match_their_description() -> None:
    a = torch.zeros(4)
    r = rejected(judge_outputs, {"outputs": [meta_of(a)]}, [], [ref_of(a)], CPU, "t")
    assert r.reason == Reason.WORKER_ERROR
    assert r.detail == "t: the worker sent 0 output tensors for 1 outputs"
    r = rejected(judge_outputs, {"outputs": [meta_of(a)]}, [torch.zeros(5)], [ref_of(a)], CPU, "t")
    assert r.reason == Reason.WORKER_ERROR
    assert "output 0 as shared does not match what the worker described" in r.detail
    r = rejected(judge_outputs, {"outputs": [meta_of(a)]}, [torch.zeros(4, dtype=torch.float64)], [ref_of(a)], CPU, "t")
    assert r.reason == Reason.WORKER_ERROR


# -- inputs -----------------------------------------------------------------------------------------------


def test_inputs_unchanged_pass() -> None:
    sent = [torch.arange(6.0), torch.ones(2, 2)]
    judge_inputs([s.clone() for s in sent], sent, "t")


def test_input_mutated() -> None:
    sent = [torch.arange(6.0), torch.ones(2, 2)]
    after = [sent[0].clone(), sent[1].clone()]
    after[1][0, 0] = 2.0
    r = rejected(judge_inputs, after, sent, "trial 4/5 (base)")
    assert (r.reason, r.check) == (Reason.INPUT_MUTATED, "inputs")
    assert r.detail.startswith("trial 4/5 (base): input 1 was modified by the forward pass")


def test_input_changed_bitwise_or_in_shape() -> None:
    sent = [torch.tensor([0.0, 1.0])]
    assert rejected(judge_inputs, [torch.tensor([-0.0, 1.0])], sent, "t").reason == Reason.INPUT_MUTATED
    assert rejected(judge_inputs, [torch.tensor([[0.0, 1.0]])], sent, "t").reason == Reason.INPUT_MUTATED
    nan = [torch.tensor([float("nan")])]
    judge_inputs([nan[0].clone()], nan, "t")  # the same NaN is unchanged


def test_inputs_not_reported() -> None:
    r = rejected(judge_inputs, [], [torch.zeros(2)], "t")
    assert (r.reason, r.detail) == (Reason.WORKER_ERROR, "t: the worker did not report its inputs")


# -- values -----------------------------------------------------------------------------------------------


def test_compare_all_passes_with_the_worst_errors() -> None:
    gold = [torch.ones(8, dtype=torch.float64), torch.full((3,), 2.0, dtype=torch.float64)]
    outs = [torch.ones(8), torch.tensor([2.0, 2.0, 2.001])]
    worst, norm = compare_all(outs, gold, 1e-2, "t")
    assert 0 < worst < 1e-2 and 0 < norm < 1e-2


def test_compare_all_wrong_values() -> None:
    gold = [torch.ones(8, dtype=torch.float64)]
    out = torch.ones(8)
    out[5] = 3.0
    r = rejected(compare_all, [out], gold, 1e-3, "trial 2/5 (base)")
    assert (r.reason, r.check) == (Reason.WRONG_OUTPUT, "correctness")
    assert "trial 2/5 (base), output 0: 1 of 8 elements exceed the tolerance" in r.detail
    assert "index (5,): got 3" in r.detail
    assert r.errors is not None and r.errors[0] > 1e-3 and r.errors[1] > 0


def test_compare_all_nan_and_shape() -> None:
    gold = [torch.ones(4, dtype=torch.float64)]
    r = rejected(compare_all, [torch.tensor([1.0, float("nan"), 1.0, 1.0])], gold, 1e-3, "t")
    assert r.reason == Reason.NAN_OUTPUT and "NaN or Inf where the reference is finite" in r.detail
    r = rejected(compare_all, [torch.ones(2, 2)], gold, 1e-3, "t")
    assert (r.reason, r.check) == (Reason.WRONG_SHAPE, "correctness")
    assert r.detail == "t, output 0: shape (2, 2), expected (4,)"
    assert r.errors is None


def test_compare_all_checks_every_output() -> None:
    gold = [torch.ones(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)]
    r = rejected(compare_all, [torch.ones(4), torch.ones(4)], gold, 1e-3, "t")
    assert "t, output 1:" in r.detail


# -- coverage, re-read, timing ----------------------------------------------------------------------------


def test_coverage_measured() -> None:
    cov, basis = measure_coverage({"own_us": 300.0, "other_us": 100.0}, 0.0, 0.0, "cuda")
    assert cov == pytest.approx(0.75) and "300 µs" in basis
    cov, basis = measure_coverage(None, 0.2, 0.8, "cpu")
    assert cov == pytest.approx(0.25) and "wall time inside Triton launches" in basis
    assert measure_coverage(None, 0.2, 0.0, "cpu")[0] == 0.0
    assert measure_coverage(None, 0.2, 0.8, "cuda") is None  # no profile taken


def test_decoy_kernel() -> None:
    check = judge_coverage(0.75, "basis", 0.5)
    assert (check.name, check.outcome, check.detail) == ("coverage", "pass", "75%: basis")
    r = rejected(judge_coverage, 0.2, "wall time inside Triton launches 0.2 s of 1 s", 0.5)
    assert (r.reason, r.check) == (Reason.DECOY_KERNEL, "coverage")
    assert r.detail.startswith("only 20% of the forward's time is in the candidate's own Triton kernels")


def test_output_changed_after_return() -> None:
    judge_recheck(None)
    judge_recheck("")
    r = rejected(judge_recheck, "trial 2, output 0")
    assert (r.reason, r.check) == (Reason.OUTPUT_CHANGED, "recheck")
    assert "an output changed after forward returned (trial 2, output 0)" in r.detail


def samples(ms: float, n: int = 30, pre: float = 0.1) -> Samples:
    return Samples(event_ms=[ms] * n, wall_ms=[ms + 0.01] * n, outer_ms=[ms] * n, pre_ms=[pre] * n)


ROOF = {"floor_ms": 0.5, "bound": "memory", "flops": 1e9, "bytes": 1e9}


def test_timing_summary_faster_than_both_baselines() -> None:
    compiled = {"median_ms": 1.5, "mode": "default", "modes": {"default": 1.5}}
    summary, check = timing_summary(samples(1.0), samples(2.0), samples(2.0), compiled, None, {}, {}, ROOF, None,
                                    "default")
    t = Timing.model_validate(summary)
    assert t.median_ms == 1.0 and t.eager_ms == 2.0 and t.speedup_vs_eager == 2.0 and t.vs_eager == "faster"
    assert t.compile_ms == 1.5 and t.speedup_vs_compile == 1.5 and t.vs_compile == "faster"
    assert t.best_baseline == "torch.compile" and t.best_baseline_ms == 1.5
    assert t.floor_ms == 0.5 and t.fraction_of_floor == 0.5 and t.bound == "memory" and t.floor_unavailable is None
    assert t.suspect == [] and t.flush_spin_ms == {"candidate": 0.1, "eager": 0.1}
    assert (check.name, check.outcome) == ("timing", "pass")
    assert check.detail.startswith("1 ms (p25 1, p75 1); eager 2 ms; noise band 1.0%")


def test_timing_summary_without_compile_or_floor() -> None:
    summary, _ = timing_summary(samples(2.0), samples(2.0), samples(2.0), None, "torch.compile failed", {}, {},
                                None, "RuntimeError: no meta kernel", "max-autotune")
    t = Timing.model_validate(summary)
    assert t.compile_mode == "max-autotune" and t.compile_ms is None and t.vs_compile is None
    assert t.compile_unavailable == "torch.compile failed"
    assert t.vs_eager == "no change" and t.best_baseline == "eager"
    assert t.floor_ms is None and t.floor_unavailable == "RuntimeError: no meta kernel"


def test_timing_summary_flags_the_incredible() -> None:
    roof = {**ROOF, "floor_ms": 0.5}
    summary, check = timing_summary(samples(0.1), samples(2.0), samples(2.0), None, None, {}, {}, roof, None, None)
    assert check.outcome == "fail"
    assert any("roofline floor" in f for f in summary["suspect"])
    assert any("more than 10x faster" in f for f in summary["suspect"])
    assert "suspect: faster than the roofline floor" in check.detail
