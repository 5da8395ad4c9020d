"""The soak test (bench/soak.py, issue 24 item 6) in its short version: 12 steps through a provider outage of
1 s ridden out, a SIGKILL while a coder waits on the model, a resume, an outage past the retry window that
ends the run `failed` and resumable, and a last resume to the budget; nothing lost or repeated.

Not flaky by construction: the script waits on the run's files and states (trace records, the model server's
requests, the child's exit), never on a fixed sleep racing the run; the outages last until they have reached
the run. Its own checks are asserted through the JSON it writes.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "soak.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _soak():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("soak", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["soak"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_short_soak_loses_and_repeats_nothing(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--steps", "12", "--outage-s", "1", "--seed", "1",
                        "--work-dir", str(tmp_path), "--json", str(out)], capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    data = json.loads(out.read_text())
    f = data["figures"]
    assert data["error"] is None and f["counted_steps"] == 12
    assert f["provider_failed_steps"] == 2 and f["trace_records"] == 14 and f["generations"] == 7
    assert f["retries_first_outage"] > 0 and f["server_503"] > 0
    start, failed, finished = data["phases"]
    assert start["exit_code"] == -9 and start["runs_status"]  # what `runs` shows after a SIGKILL is reported
    assert (failed["exit_code"], failed["status"], failed["resumable"]) == (1, "failed", True)
    assert any(f"resume: kernelwright optimize --resume {data['run_id']}" in ln for ln in failed["end_lines"])
    assert (finished["exit_code"], finished["status"]) == (0, "finished")
    assert [s["steps"] for s in data["samples"]][-1] == 14 and f["bytes_per_step"] > 0
    assert "all checks pass" in r.stdout and "stand-in evaluator" in r.stdout


def test_the_scripted_strategist_never_repeats_a_key_and_siblings_differ() -> None:
    soak = _soak()
    parent = soak.SEED_SRC
    prompt = (f"## The parent kernel (seed)\n```python\n{parent}```\n\n"
              "## Changes already tried on this parent (failed, or their result is already known)\n{tried}\n\n"
              "## Other branches on this parent in this generation\n{siblings}\n")
    first = soak.strategist_proposal(prompt.format(tried="(none)", siblings="(none)"))
    second = soak.strategist_proposal(prompt.format(tried="(none)", siblings="propose your choice number 2 in order"))
    assert first["key"] != second["key"] and first["key"] not in ("BLOCK=256", "NUM_WARPS=4")
    again = soak.strategist_proposal(prompt.format(tried=first["key"], siblings="(none)"))
    assert again["key"] != first["key"]
    # the coder applies the key to the knob's line, tagged so that every child is a new kernel
    coder_prompt = (f"## The parent kernel (seed)\n```python\n{parent}```\n\n## The change to make\nx\n"
                    f"(category tiling, key {first['key']}; why: y)")
    edit = soak.coder_edit(coder_prompt)
    name, value = first["key"].split("=")
    assert parent.count(edit["old"]) == 1 and edit["new"].startswith(f"{name} = {value}  # soak ")
