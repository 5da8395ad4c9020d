"""bench/soak_gpu.py's memory checks, on made-up samples: device memory that steps by whole evaluations in flight
passes as long as the level it falls back to holds; memory that stays behind fails, whatever the occupancy."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "soak_gpu.py"
GIB = 2**30


def _soak():
    spec = importlib.util.spec_from_file_location("soak_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _samples(in_flight: list[int], leak_per_sample: float = 0.0) -> list[dict]:
    """One sample a minute: 2.8 GiB of the run's own plus 6 GiB per evaluation in flight, plus a leak."""
    return [{"t": 60.0 * i, "gpu_used_total": int((2.8 + 6 * k + leak_per_sample * i) * GIB),
             "worker_rss": int(6 * GIB)} for i, k in enumerate(in_flight)]


def test_more_evaluations_in_flight_late_is_no_growth() -> None:
    # the second quarter happens to sample fewer evaluations in flight than the last: its median is one lower
    occupancy = [1, 5, 7, 4] + [1, 6, 6, 5] + [3, 7, 5, 8] + [0, 7, 7, 8, 7]
    figures, problems = _soak().memory_checks(_samples(occupancy), 10.0)
    assert problems == [], problems
    assert figures["gpu_used_total_last_quarter_median"] > 1.1 * figures["gpu_used_total_second_quarter_median"]


def test_memory_left_behind_is_growth() -> None:
    occupancy = [1, 5, 7, 4] * 4 + [1]
    _, problems = _soak().memory_checks(_samples(occupancy, leak_per_sample=0.8), 10.0)
    assert [p.split(":")[0] for p in problems] == ["device memory grew"], problems


def test_a_soak_cut_short_is_checked_from_its_partial_samples(tmp_path, capsys) -> None:
    # what the script writes every minute while it runs: the samples so far, no figures
    leaky = tmp_path / "leaky.json"
    leaky.write_text(__import__("json").dumps(
        {"command": ["x"], "partial": True, "samples": _samples([1, 5, 7, 4] * 4 + [1], leak_per_sample=0.8)}))
    assert _soak().again(str(leaky), 10.0) == 1
    said = capsys.readouterr().out
    assert "cut short" in said and "device memory grew" in said
    steady = tmp_path / "steady.json"
    steady.write_text(__import__("json").dumps(
        {"command": ["x"], "partial": True, "samples": _samples([1, 5, 7, 4] * 4 + [1])}))
    assert _soak().again(str(steady), 10.0) == 0


def test_too_few_samples_are_no_pass(tmp_path) -> None:
    # a soak cut short after its first sample: nothing to compare, which must not read as "every check passed"
    short = tmp_path / "short.json"
    short.write_text(__import__("json").dumps({"command": ["x"], "partial": True, "samples": _samples([1])}))
    assert _soak().again(str(short), 10.0) == 1
