"""Worker start-up: a deferred spare imports at once but sets up its device only when told to."""

from __future__ import annotations

import time

from kernelwright.evaluators.pool import Limits, Worker, WorkerPool


def test_deferred_worker_waits_for_go() -> None:
    w = Worker("cpu", Limits(), deferred=True)
    try:
        time.sleep(3.0)
        assert not w._ready
        info = w.wait_ready()  # lets it go
        stages = info["stages"]
        assert "go" in stages, stages
        assert stages["go"] >= 3.0, stages  # it waited for the word, not for its imports
        assert stages["device_ready"] >= stages["go"]
    finally:
        w.close()


def test_undeferred_worker_starts_alone() -> None:
    w = Worker("cpu", Limits())
    try:
        assert "go" not in w.wait_ready()["stages"]
    finally:
        w.close()


def test_pool_lets_the_next_spare_go_on_acquire() -> None:
    pool = WorkerPool("cpu", spares=3, defer=True)  # deferred by default only on CUDA
    try:
        assert [w._went for w in pool._ready] == [True, False, False]  # an idle pool starts its first
        first = pool.acquire()
        assert first._went
        assert [w._went for w in pool._ready] == [True, False]  # the next in line sets up during this evaluation
        assert first.wait_ready()["stages"]["go"] > 0
        first.close()
        pool.fill()
        assert [w._went for w in pool._ready] == [True, False, False]  # topped up: importing, not set up
        second = pool.acquire()
        assert second.request({"op": "nope"}, None, 30.0, "a test")[0]["kind"] == "protocol"  # channel in step
        second.close()
    finally:
        pool.close()
