"""The review desk: decisions checked before they are written, read once per step; steering folded in
order; stop requests; a dead driver is told from a live one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelwright.tools.review_desk import (Decision, PendingReview, ReviewDesk, ReviewError, SteerEntry, fold)
from kernelwright.tools.runstore import RunStore


@pytest.fixture
def desk(tmp_path: Path) -> ReviewDesk:
    run = RunStore(tmp_path).create("p.py", "source", {})
    run.put_kernel("kernel A")
    return ReviewDesk(run)


def test_decisions_are_checked_against_what_waits(desk: ReviewDesk) -> None:
    with pytest.raises(ReviewError, match="no proposal is waiting"):
        desk.decide(None, Decision(type="approve"))
    desk.post([PendingReview(step_id="g1b0", proposal={"what": "x"}),
               PendingReview(step_id="g1b1", proposal=None, allowed_decisions=["reject", "respond"])])
    with pytest.raises(ReviewError, match="g9b9 is not waiting"):
        desk.decide("g9b9", Decision(type="approve"))
    with pytest.raises(ReviewError, match="approve is not allowed"):
        desk.decide("g1b1", Decision(type="approve"))
    with pytest.raises(ReviewError, match="edit needs"):
        desk.decide("g1b0", Decision(type="edit"))
    with pytest.raises(ReviewError, match="respond needs"):
        desk.decide("g1b0", Decision(type="respond"))
    with pytest.raises(ReviewError, match="not both"):
        desk.decide("g1b0", Decision(type="respond", proposal={"what": "y"}, kernel="k"))
    assert desk.decide(None, Decision(type="approve", by="me")).step_id == "g1b0"  # the oldest by default
    assert [p.step_id for p in desk.waiting()] == ["g1b1"]
    with pytest.raises(ReviewError, match="g1b0 is not waiting"):
        desk.decide("g1b0", Decision(type="reject"))  # decided once
    assert desk.decisions()["g1b0"].by == "me"
    desk.clear(["g1b0"])
    assert desk.decisions() == {} and [p.step_id for p in desk.pending()] == ["g1b1"]


def test_steering_folds_in_order_and_survives_a_cut_line(desk: ReviewDesk) -> None:
    desk.steer("note", "focus on the reduction")
    desk.steer("ban", "warps")
    desk.steer("ban", "tiling")
    desk.steer("unban", "warps")
    desk.steer("pin", next((desk.run.path / "kernels").glob("*.py")).stem)
    with (desk.run.path / "steering.jsonl").open("a") as f:
        f.write('{"kind": "note", "te')  # a write cut short by a kill
    s = desk.steering()
    assert s.notes == ["focus on the reduction"] and s.banned == ["tiling"] and s.pinned
    assert "focus on the reduction" in s.render() and "tiling" in s.render()
    with pytest.raises(ReviewError, match="needs a text"):
        desk.steer("note", "  ")
    with pytest.raises(ReviewError, match="has no kernel ffff"):
        desk.steer("pin", "ffff")
    assert fold([SteerEntry(kind="note", text="a"), SteerEntry(kind="clear"), SteerEntry(kind="note", text="b")]).notes == ["b"]
    assert fold([SteerEntry(kind="pin", text="h"), SteerEntry(kind="unpin")]).pinned is None


def test_stop_requests_and_drivers(desk: ReviewDesk) -> None:
    assert not desk.stop_requested()
    desk.request_stop("me")
    assert desk.stop_requested()
    desk.clear_stop()
    assert not desk.stop_requested()

    assert not desk.driven_elsewhere()
    desk.claim("test")
    assert not desk.driven_elsewhere(), "this process is not 'elsewhere'"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        data = json.loads((desk.dir / "driver.json").read_text())
        (desk.dir / "driver.json").write_text(json.dumps({**data, "pid": child.pid}))
        assert desk.driven_elsewhere()
    finally:
        child.kill()
        child.wait()
    assert not desk.driven_elsewhere(), "a dead driver still counted as driving"
    (desk.dir / "driver.json").write_text(json.dumps({**data, "pid": os.getpid()}))
    desk.release()
    assert desk.driver() is None


def test_a_pin_names_a_kernel_by_its_hash_only(desk: ReviewDesk) -> None:
    """The pin's lookup is the run's (`Run.find_kernel`, shared with the hand-off): a glob pattern used to reach
    the file system as the prefix (`*` pinned the run's one kernel), and now is refused in one sentence."""
    (h,) = [p.stem for p in (desk.run.path / "kernels").glob("*.py")]
    assert desk.steer("pin", h[:5]).text == h
    for bad, words in (("*", "is not a kernel hash"), ("../k", "is not a kernel hash"),
                       ("ffffffffffff", f"run {desk.run.id} has no kernel ffffffffffff")):
        with pytest.raises(ReviewError) as e:
            desk.steer("pin", bad)
        assert str(e.value).startswith(f"pin {bad}: ") and words in str(e.value)
    for name in ("ab12000000000000", "ab34000000000000"):  # two kernels one prefix names
        (desk.run.path / "kernels" / f"{name}.py").write_text("# kernel\n")
    with pytest.raises(ReviewError, match="give more digits"):
        desk.steer("pin", "ab")
