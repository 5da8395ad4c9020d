"""The measurement parts that need no GPU: statistics, roofline arithmetic, profile parsing, NVML, GPU locks.

Timing itself needs a CUDA device (tests/gpu); everything around it is pure and is checked here with
hand-made numbers: the A/A noise band and the speedup verdict, the sample summary, the work counted for
the roofline and the floor it implies, the cached device peaks, `ncu` CSV parsing (the recorded H100
output in tests/evaluators/data and small synthetic ones in other units), the bounded rendering for
prompts, the NVML reading without a GPU, and the per-GPU file locks across processes.
"""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from kernelwright.evaluators import Timing, gpu_monitor, roofline
from kernelwright.evaluators.locks import LockTimeout, lock_paths, measurement_lock, shared_use
from kernelwright.evaluators.profiling import (
    NcuKernel, NcuReport, Profile, breakdown_from_events, ncu_unavailable_reason, parse_ncu_csv, render,
)
from kernelwright.evaluators.roofline import Peaks, Work, count_work, device_peaks, floor_ms
from kernelwright.evaluators.timing import Samples, judge_speedup, measure, noise_band, suspect_flags

DATA = Path(__file__).resolve().parent / "data"
REPO = Path(__file__).resolve().parents[2]


# -- noise band and speedup verdicts ------------------------------------------------------------------


def test_noise_band_is_floored_at_one_percent() -> None:
    same = Samples(event_ms=[1.0] * 30)
    assert noise_band(same, Samples(event_ms=[1.0] * 30)) == pytest.approx(0.01)


def test_noise_band_is_the_relative_difference_of_the_medians() -> None:
    a = Samples(event_ms=[1.0] * 30)
    b = Samples(event_ms=[1.1] * 30)
    assert noise_band(a, b) == pytest.approx(0.1 / 1.05)


def test_noise_band_is_widened_by_the_spread() -> None:
    # a: a third each at 0.8, 1.0 and 1.2 ms -> p25 0.8, p75 1.2, median 1.0: iqr_rel 0.4, half of it 0.2.
    a = Samples(event_ms=[0.8] * 10 + [1.0] * 10 + [1.2] * 10)
    b = Samples(event_ms=[1.0] * 30)
    assert noise_band(a, b) == pytest.approx(0.2)
    assert noise_band(b, a) == pytest.approx(0.2)


@pytest.mark.parametrize(("speedup", "band", "verdict"), [
    (1.04, 0.05, "no change"),
    (1.05, 0.05, "no change"),  # the edge of the band is still inside it
    (1.06, 0.05, "faster"),
    (1 / 1.04, 0.05, "no change"),
    (0.94, 0.05, "slower"),
    (1.0, 0.0, "no change"),
    (2.0, 0.5, "faster"),
    (1.4, 0.5, "no change"),
    (0.7, 0.5, "no change"),
    (0.6, 0.5, "slower"),
])
def test_judge_speedup(speedup: float, band: float, verdict: str) -> None:
    assert judge_speedup(speedup, band) == verdict


def test_a_one_percent_win_over_identical_baselines_is_no_change() -> None:
    band = noise_band(Samples(event_ms=[2.0] * 30), Samples(event_ms=[2.0] * 30))
    assert judge_speedup(1.005, band) == "no change"
    assert judge_speedup(1.02, band) == "faster"
    assert judge_speedup(0.98, band) == "slower"


# -- sample summaries ---------------------------------------------------------------------------------


def test_host_gap_is_wall_minus_the_outer_events() -> None:
    # With the outer events (flush + spin + call), the gap is host latency alone, whatever the spin lasted.
    s = Samples(event_ms=[0.1, 0.1], wall_ms=[1.30, 1.10], outer_ms=[1.25, 1.04])
    assert s.host_gaps_ms() == pytest.approx([0.05, 0.06])
    # Without them (an older worker), the call's own events: the gap then includes flush and spin.
    assert Samples(event_ms=[0.1, 0.2], wall_ms=[1.3, 1.4]).host_gaps_ms() == pytest.approx([1.2, 1.2])


def _samples(ms: float, pre: float = 1.06, host: float = 0.02, n: int = 30) -> Samples:
    """n repetitions of a call taking `ms`, after a flush+spin of `pre` ms, with `host` ms of host latency."""
    return Samples(event_ms=[ms] * n, pre_ms=[pre] * n, outer_ms=[pre + ms] * n, wall_ms=[pre + ms + host] * n)


def test_an_honest_timing_raises_no_flag() -> None:
    flags, flush_spin = suspect_flags(_samples(0.0167, pre=1.11), _samples(0.0179), floor_ms=0.0122,
                                      clocks={"before": {"throttled": False}, "after": {}})
    assert flags == [] and flush_spin == {"candidate": pytest.approx(1.11), "eager": pytest.approx(1.06)}


@pytest.mark.parametrize(("cand", "eager", "floor", "clocks", "words"), [
    (_samples(0.010), _samples(0.0179), 0.0122, {}, "faster than the roofline floor"),
    (_samples(0.0015), _samples(0.0179), None, {}, "more than 10x faster than the best baseline"),
    (_samples(0.888, pre=2.4), _samples(0.0179), 0.0122, {}, "the GPU was shared during the measurement"),
    (_samples(0.0167, host=1.0), _samples(0.0179), 0.0122, {}, "work outside the timed stream"),
    (_samples(0.0167), _samples(0.0179), None,
     {"after": {"throttled": True, "throttle": ["sw_thermal"], "sm_clock_mhz": 1410, "max_sm_clock_mhz": 1980}},
     "GPU throttled after timing: sw_thermal (SM clock 1410 of 1980 MHz)"),
])
def test_suspect_timings_are_flagged(cand: Samples, eager: Samples, floor: float | None, clocks: dict,
                                     words: str) -> None:
    flags, _ = suspect_flags(cand, eager, floor_ms=floor, clocks=clocks)
    assert len(flags) == 1 and words in flags[0], flags


def test_matching_the_compiler_where_eager_is_slow_is_not_suspect() -> None:
    """KernelBench's LayerNorm at its shipped shape: eager 8.08 ms, torch.compile 0.435 ms; an honest split-row
    kernel at 0.434 ms is 18.6x faster than eager and merely as fast as the compiler."""
    flags, _ = suspect_flags(_samples(0.434), _samples(8.08), floor_ms=0.19, best_baseline_ms=0.435)
    assert flags == []
    flags, _ = suspect_flags(_samples(0.0400), _samples(8.08), floor_ms=0.019, best_baseline_ms=0.435)
    assert len(flags) == 1 and "more than 10x faster than the best baseline (10.9x" in flags[0], flags


def test_a_throttle_reason_that_moved_no_clock_is_not_suspect() -> None:
    at_full_speed = {"throttled": True, "throttle": ["sw_power_cap"], "sm_clock_mhz": 1980, "max_sm_clock_mhz": 1980}
    flags, _ = suspect_flags(_samples(0.0167), _samples(0.0179), clocks={"before": at_full_speed, "after": at_full_speed})
    assert flags == []
    slowed = dict(at_full_speed, sm_clock_mhz=1500)
    flags, _ = suspect_flags(_samples(0.0167), _samples(0.0179), clocks={"before": at_full_speed, "after": slowed})
    assert flags == ["GPU throttled after timing: sw_power_cap (SM clock 1500 of 1980 MHz)"]


def test_summary_of_odd_sample_count() -> None:
    s = Samples(event_ms=[5.0, 1.0, 9.0, 3.0, 7.0, 2.0, 8.0, 4.0, 6.0], wall_ms=[2.0, 6.0, 4.0]).summary()
    assert s["median_ms"] == 5.0
    assert s["mean_ms"] == 5.0
    assert (s["min_ms"], s["max_ms"]) == (1.0, 9.0)
    assert (s["p25_ms"], s["p75_ms"]) == (3.0, 7.0)
    assert s["iqr_rel"] == pytest.approx(0.8)
    assert s["reps"] == 9
    assert s["wall_median_ms"] == 4.0


def test_summary_of_even_sample_count() -> None:
    s = Samples(event_ms=[4.0, 1.0, 3.0, 2.0]).summary()
    assert s["median_ms"] == 2.5
    assert (s["p25_ms"], s["p75_ms"]) == (2.0, 3.0)
    assert s["iqr_rel"] == pytest.approx(0.4)
    assert math.isnan(s["wall_median_ms"]), "no wall-clock samples: the wall median is NaN, not invented"


def test_summary_without_spread_or_time() -> None:
    flat = Samples(event_ms=[0.25] * 31).summary()
    assert flat["iqr_rel"] == 0.0 and flat["p25_ms"] == flat["p75_ms"] == 0.25
    zero = Samples(event_ms=[0.0] * 5).summary()  # must not divide by zero
    assert zero["iqr_rel"] == 0.0 and zero["median_ms"] == 0.0


def test_measure_refuses_a_cpu_device() -> None:
    calls: list[int] = []
    with pytest.raises(ValueError, match="CUDA"):
        measure(lambda i: calls.append(i), 4, torch.device("cpu"))
    assert calls == [], "nothing may run before the device is checked"


def test_measure_runs_with_its_device_current(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host-hiding spin launches on the thread's current device: timing cuda:1 from a thread where cuda:0
    is current must first make cuda:1 current (else cuda:0 spins and cuda:1's calls go unshielded)."""
    from contextlib import contextmanager

    from kernelwright.evaluators import timing

    current: list[str] = ["cuda:0"]

    @contextmanager
    def device(d: torch.device):  # type: ignore[no-untyped-def]
        before, current[0] = current[0], str(d)
        try:
            yield
        finally:
            current[0] = before

    seen: list[str] = []
    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(timing, "_measure", lambda *a, **k: seen.append(current[0]) or Samples())
    measure(lambda i: None, 1, torch.device("cuda", 1))
    assert seen == ["cuda:1"] and current == ["cuda:0"]


# -- roofline: work counted -------------------------------------------------------------------------


def test_count_work_linear_relu() -> None:
    m, k, n = 8, 32, 16
    model = nn.Sequential(nn.Linear(k, n), nn.ReLU())
    work = count_work(model, [torch.randn(m, k)])
    assert work.matmul_flops == 2 * m * n * k
    assert work.elementwise_ops == m * n, "one op per output element of the ReLU (the bias add is in addmm)"
    assert work.flops == 2 * m * n * k + m * n
    # input, weight, bias and output once each; the intermediate between Linear and ReLU is not counted
    assert work.bytes == 4 * (m * k + n * k + n + m * n)


def test_count_work_linear_without_bias() -> None:
    work = count_work(nn.Linear(64, 8, bias=False), [torch.randn(3, 64)])
    assert (work.matmul_flops, work.elementwise_ops) == (2 * 3 * 8 * 64, 0)
    assert work.bytes == 4 * (3 * 64 + 8 * 64 + 3 * 8)


class _AxPlusY(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * 2 + y


class _Transpose(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.t().contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_count_work_elementwise(dtype: torch.dtype) -> None:
    x, y = torch.randn(10, 100, dtype=dtype), torch.randn(10, 100, dtype=dtype)
    work = count_work(_AxPlusY(), [x, y])
    assert work.matmul_flops == 0
    assert work.elementwise_ops == 2 * 1000, "a multiply and an add per element"
    assert work.flops == 2000
    assert work.bytes == 3 * 1000 * x.element_size()


def test_layout_copies_cost_bytes_not_flops() -> None:
    work = count_work(_Transpose(), [torch.randn(16, 48)])
    assert work.flops == 0
    assert work.bytes == 2 * 16 * 48 * 4


# -- roofline: the floor ----------------------------------------------------------------------------

PEAKS = Peaks(device_name="Test GPU", copy_bytes_per_s=2e12, fp32_flops=50e12, tf32_flops=400e12,
              bf16_flops=800e12, fp16_flops=800e12)


def test_floor_memory_bound() -> None:
    work = Work(flops=1e9, matmul_flops=0.0, elementwise_ops=1e9, bytes=4e9)
    f = floor_ms(work, PEAKS, "fp32")
    assert f["memory_ms"] == pytest.approx(2.0)  # 4e9 B / 2e12 B/s
    assert f["compute_ms"] == pytest.approx(0.02)  # 1e9 / 50e12 FLOP/s
    assert f["floor_ms"] == pytest.approx(2.0)
    assert f["bound"] == "memory"


def test_floor_compute_bound_depends_on_precision() -> None:
    work = Work(flops=1e12 + 5e9, matmul_flops=1e12, elementwise_ops=5e9, bytes=1e8)
    fp32 = floor_ms(work, PEAKS, "fp32")
    assert fp32["compute_ms"] == pytest.approx(20.0 + 0.1)  # matmul at the fp32 rate, elementwise at fp32
    assert fp32["memory_ms"] == pytest.approx(0.05)
    assert fp32["floor_ms"] == pytest.approx(20.1) and fp32["bound"] == "compute"
    bf16 = floor_ms(work, PEAKS, "bf16")
    assert bf16["compute_ms"] == pytest.approx(1.25 + 0.1)  # matmul at the bf16 rate; elementwise stays fp32
    tf32 = floor_ms(work, PEAKS, "tf32")
    assert tf32["floor_ms"] == pytest.approx(2.5 + 0.1)


def test_copy_bandwidth_curve_interpolates_in_log_bytes_and_clamps() -> None:
    peaks = Peaks("Test GPU", 3e12, 50e12, 400e12, 800e12, 800e12,
                  copy_curve=[[1e8, 3.2e12], [1e6, 1e12], [1e7, 2e12]])  # unsorted on purpose
    assert peaks.bandwidth_at(1e5) == 1e12  # below the smallest measured size: clamped
    assert peaks.bandwidth_at(1e6) == pytest.approx(1e12)
    assert peaks.bandwidth_at(10 ** 6.5) == pytest.approx(1.5e12)  # halfway in log(bytes)
    assert peaks.bandwidth_at(10 ** 7.25) == pytest.approx(2.3e12)
    assert peaks.bandwidth_at(1e12) == 3.2e12  # above the largest: clamped
    assert PEAKS.bandwidth_at(123.0) == PEAKS.copy_bytes_per_s  # no curve: the single figure everywhere


def test_memory_floor_uses_the_bandwidth_at_the_problems_size() -> None:
    peaks = Peaks("Test GPU", 3e12, 50e12, 400e12, 800e12, 800e12, copy_curve=[[1e6, 1e12], [1e9, 3e12]])
    small = floor_ms(Work(flops=0.0, matmul_flops=0.0, elementwise_ops=0.0, bytes=1e6), peaks, "fp32")
    big = floor_ms(Work(flops=0.0, matmul_flops=0.0, elementwise_ops=0.0, bytes=1e9), peaks, "fp32")
    assert small["memory_ms"] == pytest.approx(1e6 / 1e12 * 1e3)
    assert big["memory_ms"] == pytest.approx(1e9 / 3e12 * 1e3)


def test_floor_of_a_counted_model() -> None:
    work = count_work(nn.Linear(1024, 1024, bias=False), [torch.randn(4096, 1024)])
    f = floor_ms(work, PEAKS, "fp32")
    assert f["compute_ms"] == pytest.approx(2 * 4096 * 1024 * 1024 / 50e12 * 1e3)
    assert f["memory_ms"] == pytest.approx(4 * (4096 * 1024 * 2 + 1024 * 1024) / 2e12 * 1e3)
    assert f["bound"] == "compute"


# -- roofline: cached peaks ---------------------------------------------------------------------------

GPU_NAME = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A KERNELWRIGHT_CACHE of our own and a CUDA device name, without a GPU."""
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: GPU_NAME)
    return tmp_path / f"peaks-v2-NVIDIA_H100_80GB_HBM3-torch{torch.__version__}-cuda{torch.version.cuda}.json"


def test_device_peaks_reads_the_cache_without_measuring(fake_gpu: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_measuring(device: torch.device) -> Peaks:
        raise AssertionError("device_peaks measured although the peaks are cached")

    monkeypatch.setattr(roofline, "measure_peaks", no_measuring)
    cached = {"device_name": GPU_NAME, "copy_bytes_per_s": 2.9e12, "fp32_flops": 5.1e13, "tf32_flops": 3.7e14,
              "bf16_flops": 7.2e14, "fp16_flops": 7.3e14, "measured_at": "2026-01-01T00:00:00"}
    fake_gpu.write_text(json.dumps(cached))
    peaks = device_peaks(torch.device("cuda", 0))
    assert peaks == Peaks(**cached)
    assert peaks.flops_for("bf16") == 7.2e14


def test_device_peaks_measures_once_and_caches(fake_gpu: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[torch.device] = []

    def fake_measure(device: torch.device) -> Peaks:
        measured.append(device)
        return Peaks(GPU_NAME, 1e12, 2e13, 3e13, 4e13, 5e13, "now")

    monkeypatch.setattr(roofline, "measure_peaks", fake_measure)
    fake_gpu.write_text("{not json")  # an unreadable cache is measured again, not a crash
    first = device_peaks(torch.device("cuda", 0))
    second = device_peaks(torch.device("cuda", 0))
    assert len(measured) == 1
    assert first == second and first.copy_bytes_per_s == 1e12
    assert json.loads(fake_gpu.read_text())["fp16_flops"] == 5e13


# -- Nsight Compute CSV ---------------------------------------------------------------------------------


def test_parse_recorded_h100_csv() -> None:
    kernels = parse_ncu_csv((DATA / "ncu_raw_h100.csv").read_text())
    assert len(kernels) == 2
    for k, duration in zip(kernels, (42.304, 42.336)):
        assert k.name.startswith("void unnamed>::distribution_elementwise_grid_stride_kernel")
        m = k.metrics
        assert m["duration_us"] == pytest.approx(duration)  # recorded as "42,304" ns
        assert m["dram_bytes_per_s"] == pytest.approx(1.05e12, rel=0.01)
        assert m["l2_bytes_per_s"] == pytest.approx(2.45e12, rel=0.01)
        assert m["registers_per_thread"] == 44
        assert m["theoretical_occupancy_pct"] == 62.5
        assert 30 < m["dram_pct"] < 32 and 72 < m["compute_sol_pct"] < 73
        assert set(k.stalls) >= {"long_scoreboard", "not_selected", "wait", "math_pipe_throttle", "barrier"}
        assert len(k.stalls) == 18
    assert kernels[0].stalls["not_selected"] == 3.69
    assert kernels[0].stalls["wait"] == 1.88
    assert kernels[0].metrics["dram_bytes_per_s"] == pytest.approx(1049742813918.31)


def _csv(header: list[str], units: list[str] | None, rows: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return ",".join(f'"{c}"' for c in cells)

    out = ["==PROF== Connected to process 4242 (/usr/bin/python3)", "==PROF== Disconnected from process 4242"]
    out.append(line(header))
    if units is not None:
        out.append(line(units))
    out.extend(line(r) for r in rows)
    return "\n".join(out) + "\n"


HEADER = ["ID", "Kernel Name", "gpu__time_duration.sum", "dram__bytes.sum.per_second", "lts__t_bytes.sum.per_second",
          "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
          "sm__throughput.avg.pct_of_peak_sustained_elapsed", "launch__registers_per_thread"]


def test_parse_old_style_units_and_thousands_separators() -> None:
    text = _csv(HEADER, ["", "", "msecond", "Gbyte/second", "Tbyte/second", "", "%", "register/thread"], [
        ["0", "softmax_kernel", "1.5", "1,234.5", "2.5", "12.25", "87.5", "32"],
        ["1", "other_kernel", "0.25", "900", "1", "3", "10", "1,024"],
    ])
    a, b = parse_ncu_csv(text)
    assert a.name == "softmax_kernel" and b.name == "other_kernel"
    assert a.metrics["duration_us"] == pytest.approx(1500.0)
    assert a.metrics["dram_bytes_per_s"] == pytest.approx(1.2345e12)
    assert a.metrics["l2_bytes_per_s"] == pytest.approx(2.5e12)
    assert a.metrics["compute_sol_pct"] == 87.5
    assert a.stalls == {"long_scoreboard": 12.25}
    assert b.metrics["duration_us"] == pytest.approx(250.0)
    assert b.metrics["dram_bytes_per_s"] == pytest.approx(9e11)
    assert b.metrics["registers_per_thread"] == 1024


def test_parse_new_style_units() -> None:
    text = _csv(HEADER, ["", "", "us", "Gbyte/s", "Mbyte/s", "", "%", ""], [
        ["0", "k", "7.25", "812.5", "1,500", "0.5", "3", "40"],
    ])
    (k,) = parse_ncu_csv(text)
    assert k.metrics["duration_us"] == pytest.approx(7.25)
    assert k.metrics["dram_bytes_per_s"] == pytest.approx(8.125e11)
    assert k.metrics["l2_bytes_per_s"] == pytest.approx(1.5e9)


def test_parse_nanoseconds_and_base_rates() -> None:
    text = _csv(HEADER, ["", "", "nsecond", "byte/second", "byte/s", "", "%", ""], [
        ["0", "k", "1,234,567", "3,000,000,000", "5e11", "n/a", "", "40"],
    ])
    (k,) = parse_ncu_csv(text)
    assert k.metrics["duration_us"] == pytest.approx(1234.567)
    assert k.metrics["dram_bytes_per_s"] == pytest.approx(3e9)
    assert k.metrics["l2_bytes_per_s"] == pytest.approx(5e11)
    assert k.stalls == {}, "a value that is not a number is left out, not invented"
    assert "compute_sol_pct" not in k.metrics


def test_parse_without_a_units_row() -> None:
    text = _csv(HEADER, None, [["0", "k", "42304", "1e12", "2e12", "1", "50", "40"]])
    (k,) = parse_ncu_csv(text)
    assert k.metrics["duration_us"] == pytest.approx(42.304), "base units: nanoseconds"
    assert k.metrics["dram_bytes_per_s"] == 1e12


def test_parse_skips_rows_of_the_wrong_width() -> None:
    text = _csv(HEADER, ["", "", "us", "byte/s", "byte/s", "", "%", ""], [
        ["0", "truncated", "1.0"],
        ["1", "whole", "2.0", "1", "1", "1", "1", "1"],
    ])
    assert [k.name for k in parse_ncu_csv(text)] == ["whole"]


@pytest.mark.parametrize("text", [
    "",
    "\n\n",
    "garbage that is not csv at all\n==PROF== No kernels were profiled.",
    '"only one quoted line"',
    '"a","b"\n"1","2"\n',  # no Kernel Name column
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters",
    '"ID","Kernel Name","gpu__time_duration.sum"\n"","","ns"\n',  # header and units, no kernels
], ids=["empty", "blank", "garbage", "one_line", "no_kernel_name", "no_permission", "no_rows"])
def test_parse_garbage_gives_nothing(text: str) -> None:
    assert parse_ncu_csv(text) == []


# -- breakdown and rendering --------------------------------------------------------------------------


def test_breakdown_totals_sorted_and_shares_sum_to_one() -> None:
    rows = breakdown_from_events([("c", 5.0), ("a", 10.0), ("b", 30.0), ("a", 25.0)])
    assert [r.name for r in rows] == ["a", "b", "c"]
    assert [r.calls for r in rows] == [2, 1, 1]
    assert [r.total_us for r in rows] == [35.0, 30.0, 5.0]
    assert [r.share for r in rows] == pytest.approx([0.5, 30 / 70, 5 / 70])
    assert sum(r.share for r in rows) == pytest.approx(1.0)


def test_breakdown_of_nothing() -> None:
    assert breakdown_from_events([]) == []
    zero = breakdown_from_events([("k", 0.0), ("k", 0.0)])
    assert zero[0].calls == 2 and zero[0].share == 0.0


def _big_profile() -> Profile:
    long = "very_long_kernel_name_" * 30
    return Profile(
        kernels=[{"name": f"{long}{i}", "launches": i, "grids": [[i, 1, 1]],
                  "compiled": {"registers": 40, "spills": 0, "shared_bytes": 1024, "num_warps": 4, "num_stages": 2}}
                 for i in range(60)],
        breakdown=breakdown_from_events([(f"{long}{i}", float(i + 1)) for i in range(60)]),
        ncu=NcuReport(available=True, kernels=[NcuKernel(name=f"{long}{i}", metrics={"duration_us": 4.0, "dram_pct": 80.0},
                                                         stalls={"long_scoreboard": 5.0}) for i in range(40)]),
        timing=Timing(median_ms=0.1, p25_ms=0.09, p75_ms=0.11, min_ms=0.09, max_ms=0.12, reps=30, wall_median_ms=0.12,
                      eager_ms=0.2, speedup_vs_eager=2.0, vs_eager="faster", compile_ms=0.15, speedup_vs_compile=1.5,
                      vs_compile="faster", noise_band=0.02, floor_ms=0.05, bound="memory", fraction_of_floor=0.5,
                      best_baseline_ms=0.15, best_baseline="torch.compile"),
    )


def test_render_stays_bounded() -> None:
    prof = _big_profile()
    text = render(prof)
    assert len(text) <= 2500
    assert text.startswith("device time per forward (median of 30 timed repetitions, caches flushed): 0.1 ms"), text[:200]
    assert "noise band ±2.0% (smaller differences are not real)" in text
    assert "roofline floor (least time the problem's bytes and flops can take here) 0.05 ms, memory-bound" in text
    assert "achieves 50% of it" in text
    small = render(prof, limit=300)
    assert len(small) <= 300 and small.endswith("[truncated]")
    prof.kernels = [{"name": "k" * 20_000, "launches": 1}]
    assert len(render(prof, limit=1000)) <= 1000


def test_render_says_why_things_are_unavailable() -> None:
    prof = Profile(breakdown_unavailable="no GPU: kernels ran in Triton's interpreter",
                   ncu=NcuReport(available=False, why="ncu is not installed or not on PATH"))
    text = render(prof)
    assert "device-time breakdown unavailable: no GPU: kernels ran in Triton's interpreter" in text
    assert "Nsight Compute unavailable: ncu is not installed or not on PATH" in text


def test_render_explains_interpreter_kernels() -> None:
    """On the CPU a launch record has no compiled resources: the rendering says why instead of `{}`."""
    prof = Profile(verdict="pass", kernels=[{"name": "_row_stats", "launches": 20, "grids": [[8, 1, 1], [3, 1, 1]]}],
                   breakdown_unavailable="no GPU: kernels ran in Triton's interpreter")
    text = render(prof)
    assert "launches counted over every checked forward" in text
    assert "- _row_stats: 20 launches, grid [8, 1, 1] (+1 other grids); compiled resources unavailable" in text
    assert "{}" not in text


def test_render_shows_recorded_ncu_metrics() -> None:
    kernels = parse_ncu_csv((DATA / "ncu_raw_h100.csv").read_text())
    text = render(Profile(ncu=NcuReport(available=True, kernels=kernels)))
    assert "unavailable" not in text
    assert text.count("\n- ") == 2  # one line per profiled kernel, under the Nsight Compute header
    assert text.startswith("Nsight Compute (SOL = % of the unit's peak throughput")
    assert "duration 42.3 µs" in text and "DRAM 1.05 TB/s" in text
    assert "top stalls not_selected 3.7, wait 1.9, math_pipe_throttle 1.8" in text


def test_ncu_unavailable_reason_follows_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", "")
    assert ncu_unavailable_reason() == "ncu is not installed or not on PATH"
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert ncu_unavailable_reason() is None


# -- NVML ---------------------------------------------------------------------------------------------


@pytest.fixture
def fresh_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget any NVML handle an earlier reading cached."""
    monkeypatch.setattr(gpu_monitor, "_state", {})


def test_gpu_monitor_never_raises_here(fresh_nvml: None) -> None:
    """Whatever this machine has: a GPU gives real clocks, no GPU gives a reason, a GPU index that does not
    exist gives a reason too (and never an exception)."""
    import torch

    reading = gpu_monitor.read(0)
    if torch.cuda.is_available():
        assert reading["available"] is True, reading
        assert 0 < reading["sm_clock_mhz"] <= reading["max_sm_clock_mhz"] and reading["power_w"] > 0
        assert isinstance(reading["throttle"], list)
    else:
        assert reading == {"available": False, "why": reading["why"]} and "NVML" in reading["why"], reading
    missing = gpu_monitor.read(torch.cuda.device_count() + 7)
    assert missing["available"] is False and "NVML" in missing["why"], missing


def test_gpu_monitor_without_nvml(fresh_nvml: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    reading = gpu_monitor.read(0)
    assert reading["available"] is False
    assert reading["why"].startswith("NVML unavailable")


class _FakeNvml:
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self, mask: int = 0, fail_init: bool = False, fail_handle: bool = False) -> None:
        self.mask, self.fail_init, self.fail_handle = mask, fail_init, fail_handle
        self.handles: list[int] = []

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("Driver Not Loaded")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if self.fail_handle:
            raise RuntimeError("Invalid Argument")
        self.handles.append(index)
        return index

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self.mask

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return {1: 1755, 2: 2619}[kind]

    def nvmlDeviceGetMaxClockInfo(self, h: int, kind: int) -> int:
        return 1980

    def nvmlDeviceGetTemperature(self, h: int, kind: int) -> int:
        return 41

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 123_456


def test_gpu_monitor_decodes_a_reading(fresh_nvml: None, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeNvml(mask=0x1 | 0x4)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    r = gpu_monitor.read(1)
    assert fake.handles == [5], "the CUDA index is mapped to the physical GPU"
    assert r["available"] is True
    assert (r["sm_clock_mhz"], r["mem_clock_mhz"], r["max_sm_clock_mhz"]) == (1755, 2619, 1980)
    assert r["temperature_c"] == 41 and r["power_w"] == pytest.approx(123.456)
    assert r["throttle"] == ["gpu_idle", "sw_power_cap"]
    assert r["throttled"] is True, "a power cap is not benign"


def test_gpu_monitor_benign_reasons_are_not_throttling(fresh_nvml: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml(mask=0x1 | 0x10))
    r = gpu_monitor.read(0)
    assert r["throttle"] == ["gpu_idle", "sync_boost"] and r["throttled"] is False


@pytest.mark.parametrize(("fake", "why"), [
    (_FakeNvml(fail_init=True), "NVML unavailable: Driver Not Loaded"),
    (_FakeNvml(fail_handle=True), "NVML read failed: Invalid Argument"),
], ids=["init_fails", "read_fails"])
def test_gpu_monitor_failures_are_readings(fresh_nvml: None, monkeypatch: pytest.MonkeyPatch, fake: _FakeNvml,
                                           why: str) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert gpu_monitor.read(0) == {"available": False, "why": why}


# -- GPU locks across processes ---------------------------------------------------------------------------

_HOLDER = textwrap.dedent("""
    import pathlib, sys, time
    import torch
    from kernelwright.evaluators.locks import measurement_lock, shared_use
    mode, held, release = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    device = torch.device("cuda", 0)  # only names the lock file; no GPU is touched
    with (measurement_lock(device, timeout=30) if mode == "exclusive" else shared_use(device)):
        held.write_text(mode)
        deadline = time.monotonic() + 60
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
""")

CUDA0 = torch.device("cuda", 0)


@pytest.fixture
def lock_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(cache))
    return cache


@contextmanager
def _held_by_another_process(mode: str, tmp_path: Path) -> Iterator[None]:
    """Another process holds the cuda:0 lock (`exclusive` or `shared`) until the block ends."""
    held, release = tmp_path / f"held-{mode}", tmp_path / f"release-{mode}"
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, mode, str(held), str(release)], cwd=REPO,
                            env=os.environ.copy(), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not held.exists():
            assert proc.poll() is None, f"the lock holder died: {proc.stderr.read() if proc.stderr else ''}"
            assert time.monotonic() < deadline, "the lock holder never got its lock"
            time.sleep(0.01)
        yield
    finally:
        release.write_text("go")
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _Entrant(threading.Thread):
    """Enters a lock in a thread of this process and records when."""

    def __init__(self, lock: Any, hold_s: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.lock, self.hold_s = lock, hold_s
        self.entered = threading.Event()
        self.entered_at = self.left_at = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.lock:
                self.entered_at = time.monotonic()
                self.entered.set()
                time.sleep(self.hold_s)
                self.left_at = time.monotonic()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
            self.entered.set()


def test_lock_files_live_in_the_cache(lock_cache: Path) -> None:
    main, gate = lock_paths(torch.device("cuda", 3))
    assert Path(main) == lock_cache / "locks" / "cuda3.lock" and Path(gate) == lock_cache / "locks" / "cuda3.gate"
    assert lock_paths(CUDA0) != lock_paths(torch.device("cuda", 1))


def test_a_gpu_is_locked_by_its_uuid_not_by_the_index_a_process_knows_it_by(
        lock_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # two processes with different CUDA_VISIBLE_DEVICES: one knows the GPU as cuda:1, the other as cuda:0
    uuids = {0: "GPU-aaaa", 1: "GPU-bbbb"}
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: type("P", (), {"uuid": uuids[i]})())
    seen_alone = lock_paths(torch.device("cuda", 1))
    uuids[0] = "GPU-bbbb"
    assert lock_paths(torch.device("cuda", 0)) == seen_alone
    assert Path(seen_alone[0]).name == "cuda-GPU-bbbb.lock"


def test_measurement_waits_for_shared_use_then_runs(lock_cache: Path, tmp_path: Path) -> None:
    with _held_by_another_process("shared", tmp_path):
        t0 = time.monotonic()
        with pytest.raises(LockTimeout, match="busy"):
            with measurement_lock(CUDA0, timeout=0.3):
                pytest.fail("a measurement ran while another process used the GPU")
        assert 0.3 <= time.monotonic() - t0 < 10
        with shared_use(CUDA0):
            pass  # shared use overlaps shared use
    with measurement_lock(CUDA0, timeout=5):
        pass  # free again once the other process let go


def test_lock_timeout_while_another_process_measures(lock_cache: Path, tmp_path: Path) -> None:
    with _held_by_another_process("exclusive", tmp_path):
        t0 = time.monotonic()
        with pytest.raises(LockTimeout):
            with measurement_lock(CUDA0, timeout=0.3):
                pytest.fail("two measurements overlapped")
        assert 0.3 <= time.monotonic() - t0 < 10
        with measurement_lock(torch.device("cuda", 1), timeout=1):
            pass  # another GPU is not blocked
        with shared_use(torch.device("cpu")):
            pass  # CPU work takes no GPU lock


def test_shared_use_waits_for_a_measurement(lock_cache: Path, tmp_path: Path) -> None:
    with _held_by_another_process("exclusive", tmp_path):
        user = _Entrant(shared_use(CUDA0))
        user.start()
        assert not user.entered.wait(0.5), "shared use overlapped another process's measurement"
    assert user.entered.wait(10), "shared use never started after the measurement ended"
    assert user.error is None
    user.join(5)


def test_a_waiting_measurement_goes_before_new_shared_users(lock_cache: Path, tmp_path: Path) -> None:
    with _held_by_another_process("shared", tmp_path):
        measurement = _Entrant(measurement_lock(CUDA0, timeout=30), hold_s=0.3)
        measurement.start()
        time.sleep(0.4)  # the measurement now holds the turnstile and waits for the other process
        assert not measurement.entered.is_set()
        late_user = _Entrant(shared_use(CUDA0))
        late_user.start()
        assert not late_user.entered.wait(0.4), "a new shared user jumped ahead of a waiting measurement"
    assert measurement.entered.wait(10) and late_user.entered.wait(10)
    assert measurement.error is None and late_user.error is None
    measurement.join(5)
    late_user.join(5)
    assert late_user.entered_at >= measurement.left_at, "shared use overlapped the measurement"


def test_no_gpu_lock_is_waited_for_while_the_reference_lock_is_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock order that keeps concurrent evaluations on one GPU from deadlocking: a GPU lock first, then the
    evaluator's `_ref_lock`, never the other way (`_time` re-checks timed outputs under the measurement lock).
    Checked on the CPU by watching every shared_use the evaluator takes during a whole evaluation."""
    from kernelwright.evaluators import EvalPolicy, Evaluator, load_problem
    from kernelwright.evaluators import evaluator as evmod

    root = Path(__file__).resolve().parents[1] / "kernels" / "honest"
    held: list[bool] = []
    box: dict[str, Any] = {}
    real = evmod.shared_use

    @contextmanager
    def watched(device: torch.device, *a: Any, **k: Any) -> Iterator[None]:
        held.append(box["ev"]._ref_lock._is_owned())
        with real(device, *a, **k):
            yield

    monkeypatch.setattr(evmod, "shared_use", watched)
    with Evaluator(load_problem(root / "relu_problem.py"), "cpu", EvalPolicy(trials=1)) as ev:
        box["ev"] = ev
        result = ev.evaluate((root / "relu_candidate.py").read_text())
    assert result.verdict == "pass" and len(held) >= 3
    assert not any(held), f"{sum(held)} of {len(held)} GPU locks were waited for while holding _ref_lock"
