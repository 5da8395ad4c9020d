"""The fused Triton passes of `compare` give the torch path's verdicts and numbers.

The kernels run under the Triton interpreter on CPU tensors. TRITON_INTERPRET must be set before triton is
imported, and other tests import it, so every fused comparison runs in ONE subprocess started with the
variable set: it builds the cases below, compares each with `fused=True` and `fused=False`, counts the
kernel launches, and prints the results as JSON; the tests then check them case by case. Sizes are small
(the interpreter is slow) and most are not a multiple of the kernels' block. On a GPU host, `pytest -m gpu`
runs the same cases compiled, on CUDA tensors, through the automatic choice.
"""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelwright.evaluators import compare as C

TOL = 1e-4
BLOCK = 4096
N = 3 * BLOCK + 17  # not a multiple of the block: the last program is masked


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _cases() -> dict[str, tuple[torch.Tensor, torch.Tensor, float]]:
    """name -> (out, ref, tol). Built the same way in the subprocess and (for the expectations) here."""
    f64 = torch.float64
    ref = torch.randn(N, generator=_gen(0), dtype=f64)
    noise = torch.randn(N, generator=_gen(1), dtype=f64)
    noisy = ref * (1 + 1e-6 * noise)
    cases: dict[str, tuple[torch.Tensor, torch.Tensor, float]] = {}
    cases["pass_fp32"] = (noisy.float(), ref, TOL)
    bad = noisy.clone()
    bad[[5, BLOCK + 4, N - 3]] += torch.tensor([0.01, -0.5, 0.02], dtype=f64)
    cases["fail_fp32"] = (bad.float(), ref, TOL)
    tail = noisy.float()
    tail[-1] += 1.0  # the only bad element is in the masked last block
    cases["fail_in_tail"] = (tail, ref, TOL)
    cases["pass_smaller_than_block"] = (noisy[:1000].float(), ref[:1000], TOL)
    cases["pass_fp64_out"] = (noisy, ref, TOL)

    nan_out = noisy.float()
    nan_out[123] = float("nan")
    cases["nan_where_ref_finite"] = (nan_out, ref, TOL)
    inf_out = noisy.float()
    inf_out[N - 1] = float("-inf")
    cases["inf_where_ref_finite"] = (inf_out, ref, TOL)
    stale = noisy.float()
    stale.view(torch.int32)[[7, 5000, N - 1]] = C.POISON_BITS[torch.float32]
    cases["poison_is_stale"] = (stale, ref, TOL)

    ref_nf = ref.clone()
    ref_nf[[10, 5000, N - 2]] = torch.tensor([float("inf"), float("-inf"), float("nan")], dtype=f64)
    out_nf = noisy.clone()
    out_nf[[10, 5000, N - 2]] = torch.tensor([float("inf"), float("-inf"), float("nan")], dtype=f64)
    cases["matching_non_finite_passes"] = (out_nf.float(), ref_nf, TOL)
    wrong_sign = out_nf.clone()
    wrong_sign[5000] = float("inf")
    cases["inf_of_wrong_sign_fails"] = (wrong_sign.float(), ref_nf, TOL)
    finite_for_inf = out_nf.clone()
    finite_for_inf[10] = 1.0
    cases["finite_where_ref_inf_fails"] = (finite_for_inf.float(), ref_nf, TOL)
    all_inf = torch.full((N,), float("inf"), dtype=f64)
    cases["all_inf_reference_matched"] = (all_inf.float(), all_inf, TOL)

    cases["fp16_vs_fp64_gold_passes"] = (noisy.half(), ref, 1e-2)
    cases["fp16_vs_fp64_gold_fails"] = (noisy.half(), ref, 1e-4)
    cases["bf16_vs_fp64_gold_passes"] = (noisy.bfloat16(), ref, 1e-2)
    cases["bf16_vs_fp64_gold_fails"] = (noisy.bfloat16(), ref, 1e-3)

    cases["native_fp32_gold"] = (noisy.float(), ref.float(), TOL)
    for name, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        r = ref.to(dt)
        o = r.clone()
        o[::97] = (r[::97].float() * 1.01).to(dt)  # every 97th element 1% off
        cases[f"native_{name}_gold_passes"] = (o, r, 2e-2)
        cases[f"native_{name}_gold_fails"] = (o, r, 1e-3)

    zeros = torch.zeros(N, dtype=f64)
    cases["all_zero_reference_zero_output"] = (zeros.float(), zeros, TOL)
    speck = zeros.float()
    speck[4097] = 1e-30
    cases["all_zero_reference_nonzero_output"] = (speck, zeros, TOL)

    # Shaped and non-contiguous: reshape(-1) copies, the copy is contiguous and goes to the kernels.
    ref2 = torch.randn(64, 257, generator=_gen(2), dtype=f64)
    out2 = (ref2 * (1 + 1e-6 * torch.randn(64, 257, generator=_gen(3), dtype=f64))).float().t().contiguous().t()
    assert not out2.is_contiguous()
    cases["non_contiguous_2d"] = (out2, ref2, TOL)
    out2b = out2.clone()
    out2b[7, 42] += 1.0
    cases["non_contiguous_2d_fails"] = (out2b, ref2, TOL)

    # float64 overflow: |o - r| = inf and rms = inf give inf / inf = NaN errors; torch's max keeps the NaN.
    huge = torch.full((N,), 1e308, dtype=f64)
    huge[::2] = -1e308
    cases["overflow_nan_error"] = (-huge, huge, TOL)
    return cases


# What each case must give (ok, reason name or None), independent of either implementation.
EXPECT: dict[str, tuple[bool, str | None]] = {
    "pass_fp32": (True, None),
    "fail_fp32": (False, "WRONG_OUTPUT"),
    "fail_in_tail": (False, "WRONG_OUTPUT"),
    "pass_smaller_than_block": (True, None),
    "pass_fp64_out": (True, None),
    "nan_where_ref_finite": (False, "NAN_OUTPUT"),
    "inf_where_ref_finite": (False, "NAN_OUTPUT"),
    "poison_is_stale": (False, "STALE_OUTPUT"),
    "matching_non_finite_passes": (True, None),
    "inf_of_wrong_sign_fails": (False, "WRONG_OUTPUT"),
    "finite_where_ref_inf_fails": (False, "WRONG_OUTPUT"),
    "all_inf_reference_matched": (True, None),
    "fp16_vs_fp64_gold_passes": (True, None),
    "fp16_vs_fp64_gold_fails": (False, "WRONG_OUTPUT"),
    "bf16_vs_fp64_gold_passes": (True, None),
    "bf16_vs_fp64_gold_fails": (False, "WRONG_OUTPUT"),
    "native_fp32_gold": (True, None),
    "native_fp16_gold_passes": (True, None),
    "native_fp16_gold_fails": (False, "WRONG_OUTPUT"),
    "native_bf16_gold_passes": (True, None),
    "native_bf16_gold_fails": (False, "WRONG_OUTPUT"),
    "all_zero_reference_zero_output": (True, None),
    "all_zero_reference_nonzero_output": (False, "WRONG_OUTPUT"),
    "non_contiguous_2d": (True, None),
    "non_contiguous_2d_fails": (False, "WRONG_OUTPUT"),
    "overflow_nan_error": (False, "WRONG_OUTPUT"),
}
# Cases whose verdict comes from the non-finite check after pass 1, so pass 2 never runs.
NO_PASS2 = {"nan_where_ref_finite", "inf_where_ref_finite", "poison_is_stale", "inf_of_wrong_sign_fails",
            "finite_where_ref_inf_fails", "all_inf_reference_matched"}


def _as_dict(c: C.Comparison) -> dict:
    return {"ok": c.ok, "reason": c.reason.name if c.reason else None, "detail": c.detail,
            "max_rel": c.max_rel, "norm_rel": c.norm_rel}


def _run_cases() -> dict:
    """In the subprocess (TRITON_INTERPRET=1): every case through both paths, with kernel-launch counts."""
    calls = {"pass1": 0, "pass2": 0}
    real1, real2 = C._fused_pass1, C._fused_pass2

    def pass1(*a):
        calls["pass1"] += 1
        return real1(*a)

    def pass2(*a):
        calls["pass2"] += 1
        return real2(*a)

    C._fused_pass1, C._fused_pass2 = pass1, pass2
    results = {}
    for name, (out, ref, tol) in _cases().items():
        calls.update(pass1=0, pass2=0)
        fused = _as_dict(C.compare(out, ref, tol, name, fused=True))
        launched = dict(calls)
        torch_ = _as_dict(C.compare(out, ref, tol, name, fused=False))
        auto = _as_dict(C.compare(out, ref, tol, name))  # CPU tensors: the automatic choice is torch
        results[name] = {"fused": fused, "torch": torch_, "auto": auto, "calls": launched,
                         "calls_after": dict(calls)}
    return results


@pytest.fixture(scope="module")
def results() -> dict:
    code = ("import importlib.util, json, sys\n"
            f"spec = importlib.util.spec_from_file_location('_fused_cases', {str(Path(__file__))!r})\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "print('RESULTS ' + json.dumps(m._run_cases()))\n")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULTS ")]
    assert line, p.stdout[-2000:] + p.stderr[-2000:]
    return json.loads(line[-1][len("RESULTS "):])


def _close(a: float, b: float, rel: float = 1e-12) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


def test_every_case_ran(results: dict) -> None:
    assert set(results) == set(EXPECT) == set(_cases())


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_fused_matches_torch_path(results: dict, name: str) -> None:
    r = results[name]
    fused, ref = r["fused"], r["torch"]
    ok, reason = EXPECT[name]
    assert (ref["ok"], ref["reason"]) == (ok, reason), ref["detail"]
    assert (fused["ok"], fused["reason"]) == (ok, reason), fused["detail"]
    assert _close(fused["max_rel"], ref["max_rel"]), (fused["max_rel"], ref["max_rel"])
    assert _close(fused["norm_rel"], ref["norm_rel"]), (fused["norm_rel"], ref["norm_rel"])
    assert fused["detail"] == ref["detail"]  # the worst error, the count and the locations, as reported
    # The kernels really ran (once per pass), and the automatic choice on CPU tensors did not use them.
    assert r["calls"] == {"pass1": 1, "pass2": 0 if name in NO_PASS2 else 1}
    assert r["calls_after"] == r["calls"]
    assert r["auto"] == ref


def test_expected_numbers(results: dict) -> None:
    """Spot checks against values computed by hand, so that both paths cannot be wrong together."""
    cases = _cases()
    out, ref, _ = cases["fail_in_tail"]
    rms = float(ref.square().mean().sqrt())
    expected = float((out[-1].double() - ref[-1]).abs() / (ref[-1].abs() + rms))
    assert results["fail_in_tail"]["fused"]["max_rel"] == pytest.approx(expected, rel=1e-12)
    assert "1 of 12305 elements" in results["fail_in_tail"]["fused"]["detail"]
    assert f"index ({N - 1},)" in results["fail_in_tail"]["fused"]["detail"]
    out, ref, _ = cases["fail_fp32"]
    by_hand = max(abs(float(out[i]) - float(ref[i])) / (abs(float(ref[i])) + rms) for i in (5, BLOCK + 4, N - 3))
    assert results["fail_fp32"]["fused"]["max_rel"] == pytest.approx(by_hand, rel=1e-12)
    assert by_hand > 0.1
    assert "3 of 12305 elements" in results["fail_fp32"]["fused"]["detail"]
    # An all-zero reference: the error is measured against the smallest normal float64.
    assert results["all_zero_reference_zero_output"]["fused"]["max_rel"] == 0.0
    speck = float(torch.tensor(1e-30, dtype=torch.float32))
    assert results["all_zero_reference_nonzero_output"]["fused"]["max_rel"] == pytest.approx(
        speck / torch.finfo(torch.float64).tiny, rel=1e-12)
    assert math.isnan(results["overflow_nan_error"]["fused"]["max_rel"])
    for name in ("pass_fp32", "native_fp32_gold", "non_contiguous_2d", "matching_non_finite_passes"):
        assert 0 < results[name]["fused"]["max_rel"] < 1e-5 and 0 < results[name]["fused"]["norm_rel"] < 1e-5
    assert results["pass_fp64_out"]["fused"]["max_rel"] < 1e-5


def test_automatic_choice_and_forcing_on_cpu() -> None:
    """CPU tensors never go to the kernels unless forced; forcing them on what they cannot take raises."""
    ref = torch.randn(100, generator=_gen(4), dtype=torch.float64)
    o = ref.float()
    assert not C._fused_ok(C._flat(o), C._flat(ref))
    assert C._fused_ok(C._flat(o), C._flat(ref), need_cuda=False)
    assert C._mode(o, ref, None) == "torch"
    assert C._mode(o, ref, False) == "torch"
    strided = torch.randn(200, dtype=torch.float32)[::2]
    assert C._flat(strided).stride() == (2,)  # reshape(-1) keeps this a strided view
    assert not C._fused_ok(C._flat(strided), C._flat(ref), need_cuda=False)
    with pytest.raises(ValueError, match="fused=True"):
        C.compare(strided, ref, TOL, fused=True)
    with pytest.raises(ValueError, match="fused=True"):
        C.compare(o.to(torch.complex64), ref.to(torch.complex128), TOL, fused=True)
    assert not C._fused_ok(o[:0], ref[:0], need_cuda=False)  # empty: the torch path (no grid of 0)
    assert C.compare(strided, ref, TOL).ok is False  # the automatic path still judges it (torch)


def test_importing_compare_does_not_import_triton() -> None:
    tree = ast.parse(Path(C.__file__).read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = [a.name for n in top for a in n.names] + [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
    assert not [x for x in names if x.split(".")[0] == "triton"]
    assert any(isinstance(n, (ast.Import, ast.ImportFrom)) and any(a.name == "triton" for a in n.names)
               for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef) and fn.name == "_kernels"
               for n in ast.walk(fn))


@pytest.mark.gpu
def test_fused_on_cuda_matches_torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled kernels on a GPU host: the automatic choice takes them and agrees with the torch path."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    calls = {"pass1": 0, "pass2": 0}
    real1, real2 = C._fused_pass1, C._fused_pass2

    def pass1(*a):
        calls["pass1"] += 1
        return real1(*a)

    def pass2(*a):
        calls["pass2"] += 1
        return real2(*a)

    monkeypatch.setattr(C, "_fused_pass1", pass1)
    monkeypatch.setattr(C, "_fused_pass2", pass2)
    failures = []
    for name, (out, ref, tol) in _cases().items():
        out, ref = out.cuda(), ref.cuda()
        calls.update(pass1=0, pass2=0)
        auto = _as_dict(C.compare(out, ref, tol, name))
        launched = dict(calls)
        torch_ = _as_dict(C.compare(out, ref, tol, name, fused=False))
        ok, reason = EXPECT[name]
        if ((auto["ok"], auto["reason"]) != (ok, reason) or (torch_["ok"], torch_["reason"]) != (ok, reason)
                or not _close(auto["max_rel"], torch_["max_rel"]) or not _close(auto["norm_rel"], torch_["norm_rel"])
                or auto["detail"] != torch_["detail"]
                or launched != {"pass1": 1, "pass2": 0 if name in NO_PASS2 else 1}):
            failures.append((name, auto, torch_, launched))
    assert not C._FUSED_BROKEN, C._FUSED_BROKEN
    assert not failures, failures
