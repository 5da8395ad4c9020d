"""Evidence in bytes and limits (issue 23, item 1): what a profile tells the roles about bytes moved and occupancy.

- Nsight Compute: DRAM and L2 bytes read and written per kernel, whatever units ncu chose, and the occupancy
  limits with the one that binds (parsed from an `ncu --csv --page raw` text in ncu's own layout).
- Without counters: the bytes a launch's tensor arguments span, recorded by the launch recorder in the
  worker (`guards.argument_bytes`) and carried into `EvalResult.kernels`.
- The problem's bytes against the design's, with the times they imply and the structure/inefficiency split.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from kernelwright.evaluators import EvalPolicy, Evaluator, Limits, WorkerPool, load_problem
from kernelwright.evaluators.guards import argument_bytes
from kernelwright.evaluators.profiling import (
    NCU_ALL_METRICS, NcuKernel, NcuReport, Profile, design_bytes, occupancy_limiter, parse_ncu_csv, render,
)
from kernelwright.evaluators.result import Timing

# -- Nsight Compute --------------------------------------------------------------------------------------

_ID_COLS = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
            "Grid Size", "Device", "CC"]
_METRIC_COLS = ["dram__bytes_read.sum", "dram__bytes_write.sum", "dram__bytes.sum.per_second",
                "gpu__time_duration.sum", "launch__occupancy_limit_blocks", "launch__occupancy_limit_registers",
                "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_warps", "launch__registers_per_thread",
                "launch__waves_per_multiprocessor", "lts__t_sector_hit_rate.pct", "lts__t_sectors_op_read.sum",
                "lts__t_sectors_op_write.sum", "sm__maximum_warps_per_active_cycle_pct",
                "sm__warps_active.avg.pct_of_peak_sustained_active"]
_UNITS = ["Gbyte", "Mbyte", "Tbyte/second", "usecond", "block", "block", "block", "block", "register/thread", "",
          "%", "Msector", "sector", "%", "%"]
_ROWS = [  # a LayerNorm-like normaliser that re-reads its weights (registers bind), then a small tail kernel
    ["0", "4242", "python3.12", "127.0.0.1", "_ln_normalise", "1", "7", "(256, 1, 1)", "(8192, 1, 1)", "0", "9.0",
     "0.54", "520.5", "3.41", "311.2", "32", "1", "3", "8", "141", "62.06", "26.3", "33.125", "16,265,625",
     "12.50", "11.02"],
    ["1", "4242", "python3.12", "127.0.0.1", "_ln_tail", "1", "7", "(128, 1, 1)", "(132, 1, 1)", "0", "9.0",
     "0.0005", "12.5", "0.25", "2.5", "32", "16", "16", "16", "40", "0.06", "90.0", "0.0125", "400", "100", "7.5"],
]


def _csv(header: list[str], units: list[str], rows: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return ",".join(f'"{c}"' for c in cells)

    return "\n".join(["==PROF== Connected to process 4242 (/usr/bin/python3.12)",
                      "==PROF== Disconnected from process 4242", line(header), line(units), *map(line, rows)]) + "\n"


NCU_TEXT = _csv(_ID_COLS + _METRIC_COLS, [""] * len(_ID_COLS) + _UNITS, _ROWS)


def test_the_new_metrics_are_asked_for() -> None:
    for name in ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_sectors_op_read.sum",
                 "lts__t_sectors_op_write.sum", "launch__occupancy_limit_blocks", "launch__occupancy_limit_warps",
                 "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
                 "sm__maximum_warps_per_active_cycle_pct", "launch__waves_per_multiprocessor"):
        assert name in NCU_ALL_METRICS


def test_parse_bytes_in_any_unit_and_sectors_as_bytes() -> None:
    ln, tail = parse_ncu_csv(NCU_TEXT)
    m = ln.metrics
    assert m["dram_read_bytes"] == pytest.approx(0.54e9)  # Gbyte
    assert m["dram_write_bytes"] == pytest.approx(520.5e6)  # Mbyte
    assert m["dram_bytes_per_s"] == pytest.approx(3.41e12)  # Tbyte/second
    assert m["duration_us"] == pytest.approx(311.2)
    assert m["l2_read_bytes"] == pytest.approx(33.125e6 * 32)  # Msector -> sectors -> 32-byte sectors
    assert m["l2_write_bytes"] == pytest.approx(16_265_625 * 32)
    assert (m["occupancy_limit_registers"], m["occupancy_limit_shared_mem"], m["occupancy_limit_warps"],
            m["occupancy_limit_blocks"]) == (1, 3, 8, 32)
    assert m["waves_per_sm"] == pytest.approx(62.06) and m["theoretical_occupancy_pct"] == 12.5
    assert m["achieved_occupancy_pct"] == pytest.approx(11.02)  # the short names `diagnose` reads are kept
    assert tail.metrics["dram_read_bytes"] == pytest.approx(500_000)  # 0.0005 Gbyte
    assert tail.metrics["l2_write_bytes"] == pytest.approx(400 * 32)


@pytest.mark.parametrize("unit, value, expected", [
    ("byte", "1,024", 1024), ("Kbyte", "2", 2e3), ("Mbyte", "1.5", 1.5e6), ("Gbyte", "1.06", 1.06e9),
    ("KB", "3", 3e3), ("GB", "2", 2e9), ("Kibyte", "1", 1024), ("", "77", 77),
])
def test_parse_byte_units(unit: str, value: str, expected: float) -> None:
    (k,) = parse_ncu_csv(_csv(["ID", "Kernel Name", "dram__bytes_read.sum"], ["", "", unit], [["0", "k", value]]))
    assert k.metrics["dram_read_bytes"] == pytest.approx(expected)


@pytest.mark.parametrize("unit, factor", [("sector", 32), ("Ksector", 32e3), ("", 32)])
def test_parse_sector_units(unit: str, factor: float) -> None:
    (k,) = parse_ncu_csv(_csv(["ID", "Kernel Name", "lts__t_sectors_op_read.sum"], ["", "", unit], [["0", "k", "10"]]))
    assert k.metrics["l2_read_bytes"] == pytest.approx(10 * factor)


def test_missing_columns_are_simply_absent() -> None:
    """An older ncu, or a metric it does not know on this GPU: the rest still parses and renders."""
    (k,) = parse_ncu_csv(_csv(["ID", "Kernel Name", "gpu__time_duration.sum", "dram__bytes_write.sum"],
                              ["", "", "usecond", "Kbyte"], [["0", "k", "5", "n/a"]]))
    assert k.metrics == {"duration_us": 5.0}
    text = render(Profile(ncu=NcuReport(available=True, kernels=[k])))
    assert "- k: duration 5.0 µs" in text and "DRAM" not in text and "bound by" not in text


def test_occupancy_limiter_names_the_smallest_limit() -> None:
    ln, tail = parse_ncu_csv(NCU_TEXT)
    assert occupancy_limiter(ln.metrics) == (["registers"], 1)
    assert occupancy_limiter(tail.metrics) == (["registers", "shared memory", "warps"], 16)
    assert occupancy_limiter({"duration_us": 1.0}) is None


def test_render_shows_bytes_and_limits() -> None:
    launched = [{"name": "_ln", "launches": 2, "launches_per_forward": 1, "arg_bytes_per_forward": 1_000},
                {"name": "_ln_normalise", "launches": 4, "launches_per_forward": 2,
                 "arg_bytes_per_forward": 1_120_000_000}]
    text = render(Profile(kernels=launched, ncu=NcuReport(available=True, kernels=parse_ncu_csv(NCU_TEXT))))
    line = next(ln for ln in text.splitlines() if ln.startswith("- _ln_normalise: duration"))
    assert "DRAM 3.41 TB/s: read 540 MB + write 520 MB = 1.06 GB (1.89× its arguments' bytes), 500 MB more than " \
           "its arguments span (re-reads that missed L2, spills, or scratch buffers)" in line
    assert "L2 read 1.06 GB, write 520 MB, hit 26%" in line
    assert "occupancy achieved 11% of theoretical 12%, bound by registers: 1 blocks/SM (shared memory 3, warps 8, " \
           "block limit 32), 141 registers/thread" in line
    assert "62 waves" in line
    tail = next(ln for ln in text.splitlines() if ln.startswith("- _ln_tail"))
    assert "bound by registers and shared memory and warps: 16 blocks/SM (block limit 32)" in tail


# -- bytes the launches' tensor arguments span ------------------------------------------------------------


def test_argument_bytes_counts_distinct_memory_once() -> None:
    x = torch.zeros(64, 100)
    w = torch.zeros(100)
    y = torch.empty(64, 100)
    assert argument_bytes([x, w, y, 64, 100, 1e-5, None]) == (6400 + 100 + 6400) * 4
    assert argument_bytes([x, x, x.view(-1), w]) == (6400 + 100) * 4, "the same storage passed again is not new"
    assert argument_bytes([x[:32], x[16:48]]) == 48 * 100 * 4, "overlapping views count their union"
    assert argument_bytes([x[:, :10]]) == (63 * 100 + 10) * 4, "a strided view spans first to last element"
    assert argument_bytes([x.t()]) == 6400 * 4
    assert argument_bytes([w.expand(64, 100)]) == 100 * 4, "a broadcast (stride 0) reads its row once"
    assert argument_bytes([(x, w), [y]]) == (6400 + 100 + 6400) * 4, "tuples of tensors are read one level deep"
    assert argument_bytes([torch.nn.Parameter(torch.zeros(10))]) == 40
    assert argument_bytes([torch.empty(0), "x", 3]) == 0
    sparse = torch.eye(4).to_sparse()
    assert argument_bytes([sparse, w]) == 100 * 4, "a layout without one extent is left out, never an error"


class _Shady(torch.Tensor):
    """A tensor subclass: its methods are the candidate's code, so the recorder does not call them."""

    def data_ptr(self) -> int:  # pragma: no cover - must not run
        raise AssertionError("the launch recorder called a subclass's method")


def test_argument_bytes_reads_only_plain_tensors() -> None:
    assert argument_bytes([torch.zeros(8).as_subclass(_Shady)]) == 0


PROBLEM = '''
"""y = 2 * x + bias over a (32, 100) matrix."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(100))

    def forward(self, x):
        return 2 * x + self.bias


def get_inputs():
    return [torch.randn(32, 100)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''
"""Two kernels where one would do: t = 2 * x, then y = t + bias (t makes a round trip through memory)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _double(x_ptr, t_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(t_ptr + offs, 2 * tl.load(x_ptr + offs, mask=m), mask=m)


@triton.jit
def _add_bias(t_ptr, b_ptr, y_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    b = tl.load(b_ptr + offs % cols, mask=m)
    tl.store(y_ptr + offs, tl.load(t_ptr + offs, mask=m) + b, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(100))

    def forward(self, x):
        x = x.contiguous()
        t = torch.empty_like(x)
        y = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        _double[grid](x, t, n, BLOCK=1024)
        _add_bias[grid](t, self.bias, y, n, x.shape[-1], BLOCK=1024)
        return y
'''

X_BYTES = 32 * 100 * 4
BIAS_BYTES = 100 * 4


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with WorkerPool("cpu", Limits(), spares=0) as p:
        yield p


def test_launch_recorder_carries_argument_bytes_into_the_result(tmp_path: Path, pool: WorkerPool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end in Triton's interpreter: each kernel's bytes per forward reach `EvalResult.kernels`, and the
    profile says what the problem needs against what this two-kernel design needs."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    problem = tmp_path / "double_bias.py"
    problem.write_text(textwrap.dedent(PROBLEM))
    with Evaluator(load_problem(problem), "cpu", EvalPolicy(trials=1, compile_mode=None), pool=pool) as ev:
        result = ev.evaluate(textwrap.dedent(CANDIDATE))
        assert result.verdict == "pass", f"{result.reason}: {result.detail}"
        kernels = {k.name: k for k in result.kernels}
        assert kernels["_double"].launches_per_forward == 1
        assert kernels["_double"].arg_bytes_per_forward == 2 * X_BYTES  # x read, t written
        assert kernels["_add_bias"].launches_per_forward == 1
        assert kernels["_add_bias"].arg_bytes_per_forward == 2 * X_BYTES + BIAS_BYTES  # t and bias read, y written
        prof = ev.profile(textwrap.dedent(CANDIDATE), result=result)
    assert prof.problem_bytes == 2 * X_BYTES + BIAS_BYTES  # x, bias, y
    text = prof.text
    assert ("bytes per forward: the problem needs 26 KB; this design (2 kernels, 2 launches) needs at best "
            "51.6 KB, estimated from the launch's tensor arguments") in text, text
    assert "structure: design bytes / problem bytes = 1.98×" in text
    assert "- _double: " in text and "; args 25.6 KB" in text


# -- the problem's bytes against the design's ------------------------------------------------------------


def _timing(**kw: float) -> Timing:
    base = dict(median_ms=0.212, p25_ms=0.21, p75_ms=0.215, min_ms=0.2, max_ms=0.22, reps=30, wall_median_ms=0.25,
                eager_ms=8.3, speedup_vs_eager=39.0, vs_eager="faster", noise_band=0.01, floor_ms=0.134,
                bound="memory", fraction_of_floor=0.134 / 0.212, bytes=570e6, bandwidth=4.25e12,
                compute_floor_ms=0.002, best_baseline_ms=0.309, best_baseline="torch.compile")
    base.update(kw)
    return Timing(**base)


def _kernels(*per_forward: int) -> list[dict]:
    return [{"name": f"k{i}", "launches": 10, "grids": [[8, 1, 1]], "launches_per_forward": 1,
             "arg_bytes_per_forward": b} for i, b in enumerate(per_forward)]


def test_design_bytes_sums_the_kernels() -> None:
    assert design_bytes(_kernels(420_000_000, 420_000_000)) == (840e6, 2, 2, 0)
    assert design_bytes([{"name": "old record", "launches": 3}]) is None


def test_a_launch_that_touches_less_than_its_arguments_counts_at_its_measured_bytes() -> None:
    """Level1/35_GroupNorm_ (an H100, issue 23's repeat): a fused kernel and a clean-up launch over the few tiles it
    deferred, both handed the whole 7.5 GB input and output. The estimate said the design needed 30.1 GB at best
    and the kernel ran at "0.74x" of that floor; Nsight Compute measured 113 MB for the clean-up launch."""
    kernels = [{"name": "_fused", "launches": 10, "grids": [[918_000]], "launches_per_forward": 1,
                "arg_bytes_per_forward": 15.05e9},
               {"name": "_deferred", "launches": 10, "grids": [[4096]], "launches_per_forward": 1,
                "arg_bytes_per_forward": 15.05e9}]
    ncu = [NcuKernel(name="_fused_0d1d2d", metrics={"dram_read_bytes": 7.6e9, "dram_write_bytes": 7.5e9}),
           NcuKernel(name="_deferred_0d1d", metrics={"dram_read_bytes": 60e6, "dram_write_bytes": 53e6})]
    assert design_bytes(kernels) == (30.1e9, 2, 2, 0)
    total, _, _, capped = design_bytes(kernels, ncu)
    assert capped == 1 and total == 15.05e9 + 113e6  # the fused kernel's own estimate stands (below its measure)
    t = _timing(median_ms=7.356, floor_ms=4.955, bytes=15.05e9, bandwidth=3.04e12, fraction_of_floor=4.955 / 7.356)
    text = render(Profile(timing=t, kernels=kernels, ncu=NcuReport(available=True, kernels=ncu)))
    assert "1 kernel counted at Nsight Compute's measured bytes" in text and "measured / design floor = 1.47×" in text
    # with nothing measured, a design the kernels beat says so instead of a ratio below 1
    text = render(Profile(timing=t, kernels=kernels))
    assert "ran faster than the design floor estimated from their arguments" in text
    assert "measured / design floor" not in text and "measured / problem floor = 1.48×" in text


def test_bytes_lines_split_structure_from_inefficiency() -> None:
    text = render(Profile(timing=_timing(), kernels=_kernels(420_000_000, 420_000_000)))
    assert ("bytes per forward: the problem needs 570 MB (0.134 ms at 4.25 TB/s); this design (2 kernels, "
            "2 launches) needs at best 840 MB (0.198 ms), estimated from the launch's tensor arguments") in text
    assert "structure: design floor / problem floor = 1.47×; within the design: measured / design floor = 1.07×" \
        in text


def test_bytes_lines_without_a_design_estimate_or_a_bandwidth() -> None:
    only_problem = render(Profile(timing=_timing(), kernels=[{"name": "k", "launches": 1}]))
    assert "bytes per forward: the problem needs 570 MB (0.134 ms at 4.25 TB/s)" in only_problem
    assert "structure" not in only_problem
    cpu = render(Profile(problem_bytes=26_000, kernels=_kernels(25_600, 26_000)))
    assert "the problem needs 26 KB; this design (2 kernels, 2 launches) needs at best 51.6 KB, estimated" in cpu
    assert "structure: design bytes / problem bytes = 1.98×" in cpu


def test_the_bytes_survive_a_tight_limit() -> None:
    """What is left out to fit is the launch list and the breakdown, not the bytes and the limits."""
    long = "very_long_kernel_name_" * 4
    prof = Profile(timing=_timing(), kernels=_kernels(*[50_000_000] * 12),
                   breakdown_unavailable="x" * 400,
                   ncu=NcuReport(available=True, kernels=parse_ncu_csv(NCU_TEXT)
                                 + [NcuKernel(name=long, metrics={"duration_us": 1.0})]))
    text = render(prof, limit=1500)
    assert len(text) <= 1500
    assert "structure: design floor / problem floor" in text
    assert "bound by registers: 1 blocks/SM" in text
    assert "less useful lines left out to fit" in text
    assert "[truncated]" not in text


def test_recorded_h100_csv_names_the_limits() -> None:
    """On a real H100 (the recorded raw page), the occupancy limits and waves parse under the names asked for."""
    recorded = Path(__file__).parent / "data" / "ncu_raw_h100.csv"
    k = parse_ncu_csv(recorded.read_text())[0]
    assert (k.metrics["occupancy_limit_warps"], k.metrics["occupancy_limit_blocks"]) == (8, 32)
    assert k.metrics["waves_per_sm"] == pytest.approx(1.6)
    assert occupancy_limiter(k.metrics) == (["registers"], 5)


def test_the_kernel_taking_the_time_keeps_its_nsight_line_when_text_is_cut() -> None:
    """A small pre-pass launched before the main kernel must not push the main kernel's Nsight Compute line out
    when the evidence is cut to fit (level2/37 on an H100: the line of the kernel taking 93 % was the one left out)."""
    pre = [NcuKernel(name=f"round_to_tf32_{i}", metrics={"duration_us": 50.0, "memory_sol_pct": 80.0})
           for i in range(2)]
    main = NcuKernel(name="fused_gemm_swish_groupnorm", metrics={"duration_us": 1595.6, "compute_sol_pct": 61.0})
    prof = Profile(timing=_timing(), kernels=_kernels(*[50_000_000] * 12), breakdown_unavailable="x" * 400,
                   ncu=NcuReport(available=True, kernels=[*pre, main]))
    text = render(prof, limit=1400)
    assert "fused_gemm_swish_groupnorm" in text and "less useful line" in text
    nsight = text[text.index("Nsight Compute (SOL"):].splitlines()
    assert "fused_gemm_swish_groupnorm" in nsight[1], nsight  # first under the heading, the pre-passes after it
    whole = render(prof).splitlines()
    at = [i for i, line in enumerate(whole) if line.startswith("- ") and ("round_to_tf32_" in line
                                                                           or "fused_gemm" in line)]
    assert "fused_gemm" in whole[at[-3]] and all("round_to_tf32_" in whole[i] for i in at[-2:])


def test_every_compile_mode_measured_is_shown_not_only_the_fastest() -> None:
    """A run asked for max-autotune showed only 'torch.compile (max-autotune-no-cudagraphs) 7.39 ms'; the default
    mode (7.41 ms) and max-autotune with CUDA graphs (13.28 ms), measured in the same evaluation, never appeared."""
    t = _timing(compile_ms=7.391, compile_mode="max-autotune-no-cudagraphs",
                compile_modes={"max-autotune": 13.28, "max-autotune-no-cudagraphs": 7.391, "default": 7.411})
    text = render(Profile(timing=t))
    assert ("torch.compile (max-autotune-no-cudagraphs) 7.391 ms (the fastest measured; also max-autotune 13.28 ms, "
            "default 7.411 ms)") in text
    one = render(Profile(timing=_timing(compile_ms=0.3, compile_mode="default", compile_modes={"default": 0.3})))
    assert "torch.compile (default) 0.3 ms; noise band" in one
    failed = render(Profile(timing=_timing(compile_ms=0.3, compile_mode="default",
                                           compile_modes={"default": 0.3, "max-autotune": "out of memory"})))
    assert "(the fastest measured; also max-autotune failed)" in failed
