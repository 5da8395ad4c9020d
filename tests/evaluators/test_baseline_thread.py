"""Every call of a compiled baseline runs on one thread the BaselineTimer owns: torch.compile's CUDA-graph trees
(max-autotune, reduce-overhead) keep one graph tree and one private memory pool per calling thread, and the evaluator
calls its timer from several threads over a run (`Evaluator.prepare` in the background, then each branch's
evaluations), so before, each new thread recorded the graphs again into a pool of its own that stayed for the run.

On the CPU: torch.compile is replaced by a wrapper that records the thread each call runs on, and the CUDA-only
timing by a loop that calls the model."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from kernelwright.evaluators import baselines
from kernelwright.evaluators.baselines import BASELINE_THREAD, BaselineTimer
from kernelwright.evaluators.timing import Samples


class Recorded:
    """Which threads called the compiled model (and compiled it), and with gradients on or off."""

    def __init__(self) -> None:
        self.compiled_on: list[int] = []
        self.called_on: list[tuple[int, str, bool]] = []


def _timer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str,
           fail: Exception | None = None) -> tuple[BaselineTimer, Recorded]:
    seen = Recorded()

    def compile_(model: Any, mode: str | None = None) -> Any:
        seen.compiled_on.append(threading.get_ident())

        def compiled(*args: Any) -> Any:
            seen.called_on.append((threading.get_ident(), threading.current_thread().name, torch.is_grad_enabled()))
            if fail is not None:
                raise fail
            return model(*args)

        return compiled

    def measure(run: Any, n_sets: int, device: Any, *, reps: int, warmup: int, flush: Any) -> Samples:
        for i in range(warmup + reps):
            run(i % n_sets)
        return Samples(event_ms=[1.0] * reps, wall_ms=[1.0] * reps)

    monkeypatch.setattr(baselines.torch, "compile", compile_)
    monkeypatch.setattr(baselines, "measure", measure)
    monkeypatch.setattr(baselines, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(BaselineTimer, "cache_key", lambda self, pool, mode=None: f"test-{mode}")
    monkeypatch.setattr(BaselineTimer, "flush", None)
    ref = SimpleNamespace(device=torch.device("cpu"), native=torch.nn.Identity(),
                          precision=SimpleNamespace(allows_tf32=False))
    return BaselineTimer(ref, mode), seen  # type: ignore[arg-type]


def _from_new_thread(fn: Any) -> tuple[int, Any]:
    """`fn()` called on a fresh thread, as a branch's evaluation would: that thread's id and what fn returned."""
    out: dict[str, Any] = {}

    def body() -> None:
        out["ident"] = threading.get_ident()
        out["result"] = fn()

    t = threading.Thread(target=body)
    t.start()
    t.join()
    return out["ident"], out["result"]


def test_compiled_baselines_run_on_one_thread_whoever_calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    timer, seen = _timer(monkeypatch, tmp_path, "reduce-overhead")
    pool = [[torch.ones(4)], [torch.zeros(4)]]
    first, (best, why) = _from_new_thread(lambda: timer.compiled(pool, 3))
    assert why is None and best is not None and set(best["modes"]) == {"reduce-overhead", "default"}
    second, (best, why) = _from_new_thread(lambda: timer.compiled(pool, 3))
    assert why is None and best is not None
    callers = {first, second, threading.get_ident()}
    n_first = 2 * (3 + 3)  # two modes, three warm-ups and three repetitions each
    assert len(seen.called_on) == 2 * n_first  # the second caller timed the models kept from the first: no recompile
    assert len({ident for ident, _, _ in seen.called_on}) == 1  # one thread, hence one graph tree and one pool
    ident, name, grad = seen.called_on[0]
    assert ident not in callers and name.startswith(BASELINE_THREAD) and not grad
    assert set(seen.compiled_on) == {ident}
    timer.close()


def test_an_error_in_the_compiled_model_is_still_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The error is raised on the timer's thread and reaches `compiled()` unchanged, which says it in one sentence."""
    timer, seen = _timer(monkeypatch, tmp_path, "default", fail=RuntimeError("Inductor cannot lower this op"))
    _, (best, why) = _from_new_thread(lambda: timer.compiled([[torch.ones(4)]], 3))
    assert best is None
    assert why == "torch.compile (default) failed: RuntimeError: Inductor cannot lower this op"
    assert len(seen.called_on) == 1 and seen.called_on[0][1].startswith(BASELINE_THREAD)
    timer.close()


def test_closing_the_evaluator_ends_the_timers_thread(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`Evaluator.close` closes its timer: the thread ends and the compiled models (and their graphs) are dropped."""
    from kernelwright.evaluators.evaluator import Evaluator

    timer, seen = _timer(monkeypatch, tmp_path, "default")
    timer.compiled([[torch.ones(4)]], 3)
    worker = next(t for t in threading.enumerate() if t.ident == seen.called_on[0][0])
    assert worker is not threading.current_thread() and worker.is_alive()
    ev = Evaluator.__new__(Evaluator)  # only what close() reads: no worker pool, no reference session
    ev._ordering_lock, ev._ordering, ev._own_pool, ev._baselines = threading.Lock(), None, False, timer
    ev.close()
    worker.join(timeout=5)
    assert not worker.is_alive() and timer._compiled_models == {}


def test_the_baseline_thread_never_holds_up_exit_and_a_closed_timer_is_not_a_compile_failure(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The thread is a daemon: Python joins an executor's threads at exit, so a Ctrl-C during a max-autotune compile
    waited the compile out. A call refused because the timer closed is said, and not remembered as the mode's
    compile failure (a later timer must try again)."""
    timer, _ = _timer(monkeypatch, tmp_path, "default")
    pool = [[torch.ones(4)]]
    summary, why = timer.compiled(pool, reps=2, warmup=1)
    assert summary is not None, why
    (lane,) = [t for t in threading.enumerate() if t.name.startswith(BASELINE_THREAD)]
    assert lane.daemon
    # a call in place from the baseline thread itself does not wait on its own queue
    assert timer._on_thread(lambda: timer._on_thread(lambda: 7)) == 7
    closed = baselines._Lane()
    closed.stop()
    with pytest.raises(baselines.LaneClosed):
        closed.run(lambda: 1)
    timer._lane = closed  # closed between the caller's check and its call
    timer._compiled_models.clear()
    (tmp_path / "baselines").mkdir(exist_ok=True)
    for f in (tmp_path / "baselines").glob("*.json"):
        f.unlink()
    summary, why = timer.compiled(pool, reps=2, warmup=1)
    assert summary is None and "closed" in (why or "")
    assert "default" not in timer._compile_errors
    timer.close()
