"""Baselines, timed in the trusted process only: PyTorch eager and `torch.compile` of the reference.

A candidate never shares a process with a baseline, so it cannot slow one down. TF32 is enabled for a
baseline exactly when the precision contract allows it for the candidate. Compiling is the expensive
part, so a compiled model is kept for the evaluator's lifetime and its median is also cached on disk per
problem, device, precision, compile mode, input shapes and library versions (for one-shot `eval` runs).
Every call of a compiled model runs on one thread the timer owns (`BaselineTimer._on_thread`): CUDA-graph trees
are kept per calling thread.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, TypeVar

import torch
import triton

from .reference import ReferenceSession, tf32_mode
from .roofline import cache_dir
from .timing import Samples, flush_buffer, measure

log = logging.getLogger(__name__)

T = TypeVar("T")

BASELINE_THREAD = "kw-baselines"
"""the name (prefix) of the thread every compiled baseline runs on (`BaselineTimer._on_thread`)"""


INDUCTOR_LOGGERS = ("torch._inductor", "torch._dynamo")


@contextmanager
def quiet_inductor() -> Iterator[None]:
    """Inductor's own logging silenced while it compiles the baseline: max-autotune logs each candidate
    configuration that does not fit the GPU (out of shared memory, say) as an error with its traceback, which is
    part of its search, not a failure; a user reading the run's log must not take it for one. A compile that does
    fail still raises, and is reported in one sentence (`compile_unavailable`)."""
    saved = [(logging.getLogger(name), logging.getLogger(name).level) for name in INDUCTOR_LOGGERS]
    for logger, _ in saved:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in saved:
            logger.setLevel(level)


GRAPH_MODES = ("max-autotune", "reduce-overhead")
"""torch.compile modes that record CUDA graphs (`BaselineTimer.graphs_skipped`)"""
GRAPH_INPUT_MAX_SHARE = 1 / 32
"""a CUDA-graph mode is not timed when one input set exceeds this share of the device's memory (2.5 GB of 80)"""


class LaneClosed(RuntimeError):
    """The timer was closed before this call of a compiled baseline ran (`BaselineTimer.close`)."""


class _Lane:
    """One daemon thread that runs calls in order, each waited for by its caller (`BaselineTimer._on_thread`).
    A daemon, unlike an executor's thread: Python joins an executor's threads at exit, so a Ctrl-C during a
    max-autotune compile would wait the compile out (minutes); a caller waiting here is interrupted at once."""

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stopped = False
        threading.Thread(target=self._loop, name=BASELINE_THREAD, daemon=True).start()

    def _loop(self) -> None:
        while (item := self._q.get()) is not None:
            fn, fut = item
            try:
                fut.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - handed to the caller, raised there
                fut.set_exception(e)

    def run(self, fn: Callable[[], T]) -> T:
        fut: Future[T] = Future()
        with self._lock:  # a call is queued before the stop sentinel or refused: it never waits forever
            if self._stopped:
                raise LaneClosed("the baseline timer was closed")
            self._q.put((fn, fut))
        return fut.result()

    def stop(self) -> None:
        """End the thread after the calls queued so far (not waited for)."""
        with self._lock:
            if not self._stopped:
                self._stopped = True
                self._q.put(None)


class BaselineTimer:
    """Times the reference model (eager and compiled) on a pool of input sets with `timing.measure`."""

    def __init__(self, reference: ReferenceSession, compile_mode: str | None = "default") -> None:
        self.ref = reference
        self.device = reference.device
        self.compile_mode = compile_mode
        self._compiled_models: dict[str, Any] = {}
        self._compile_errors: dict[str, str] = {}
        self._flush: torch.Tensor | None = None
        self._closed_gen = 0
        self._lane: _Lane | None = None
        self._lane_lock = threading.Lock()

    def _on_thread(self, fn: Callable[[], T]) -> T:
        """`fn()` run on the timer's own long-lived thread (started at the first call), waited for, its exception
        raised here unchanged. Every call of a compiled model goes through it: torch.compile's CUDA-graph trees
        (max-autotune, reduce-overhead) keep one graph tree and one private memory pool per calling thread, and
        the evaluator calls the timer from whichever thread it runs on (`Evaluator.prepare` in the background,
        then each branch's evaluations), so each new thread recorded the graphs again into a pool of its own that
        lived as long as the compiled model: over a run they piled up. On one thread there is one tree and one pool.
        The CUDA device made current there is the timer's: the graphs and the timing's GPU spin use the current
        device. Calls from several threads queue on it (the measurement lock serialises them anyway); a call from
        that thread itself runs in place."""
        if threading.current_thread().name.startswith(BASELINE_THREAD):
            return fn()
        with self._lane_lock:
            if self._lane is None:
                self._lane = _Lane()
            lane = self._lane

        def on_device() -> T:
            if getattr(self.device, "type", None) == "cuda":
                torch.cuda.set_device(self.device)
            return fn()

        return lane.run(on_device)

    def close(self) -> None:
        """Let the timer's thread end (after a call in flight, which is not waited for: closing must not wait out a
        compile) and drop the timer's compiled models, so that their CUDA graphs and private pool can go once nothing
        else holds them (Dynamo's own caches may). A compile in flight keeps its model out of the timer. A later
        call would start a new thread and compile again; idempotent."""
        with self._lane_lock:
            lane, self._lane = self._lane, None
            self._closed_gen += 1
        if lane is not None:
            lane.stop()
        self._compiled_models.clear()

    @property
    def flush(self) -> torch.Tensor:
        if self._flush is None:
            self._flush = flush_buffer(self.device)
        return self._flush

    def _time(self, model: Any, pool: list[list[Any]], reps: int, warmup: int) -> Samples:
        """`model` timed on the calling thread, gradients off (grad mode is per thread) and TF32 as the precision
        contract allows (process-wide flags, restored after)."""
        def run(i: int) -> Any:
            return model(*pool[i])

        with torch.no_grad(), tf32_mode(self.ref.precision.allows_tf32):
            return measure(run, len(pool), self.device, reps=reps, warmup=warmup, flush=self.flush)

    def eager(self, pool: list[list[Any]], reps: int, warmup: int = 3) -> Samples:
        """The eager reference timed on the caller's thread: eager PyTorch records no graphs and keeps no state per
        thread, so it needs no hop to the timer's thread (`_on_thread`)."""
        return self._time(self.ref.native, pool, reps, warmup)

    def cache_key(self, pool: list[list[Any]], mode: str | None = None) -> str:
        shapes = [[(tuple(x.shape), str(x.dtype)) if isinstance(x, torch.Tensor) else repr(x) for x in s]
                  for s in pool[:1]]
        raw = json.dumps([self.ref.problem.digest, torch.cuda.get_device_name(self.device), self.ref.precision.value,
                          mode or self.compile_mode, shapes, torch.__version__, triton.__version__, torch.version.cuda],
                         default=str)
        return hashlib.sha256(raw.encode()).hexdigest()[:20]

    def modes(self) -> list[str]:
        """The compile modes measured for the requested one: a CUDA-graph mode pays a copy of fresh inputs
        into its static buffers on every call, so its no-graph twin is measured too and the faster counts; and
        max-autotune is measured beside the default mode, so that one evaluation states a kernel against both
        (`Timing.compile_modes`), the faster counting."""
        if self.compile_mode is None:
            return []
        also = {"max-autotune": ["max-autotune-no-cudagraphs", "default"],
                "max-autotune-no-cudagraphs": ["default"], "reduce-overhead": ["default"]}.get(self.compile_mode, [])
        return [self.compile_mode, *also]

    def compiled(self, pool: list[list[Any]], reps: int, warmup: int = 3) -> tuple[dict[str, Any] | None, str | None]:
        """The fastest compiled baseline's summary, with `mode` (the fastest) and `modes` (every mode measured:
        its median in ms, or why it failed), or None and why not."""
        if self.compile_mode is None:
            return None, "disabled"
        results: dict[str, Any] = {}
        best: dict[str, Any] | None = None
        why = None
        for mode in self.modes():
            skip = self.graphs_skipped(mode, pool)
            if skip:
                results[mode] = skip
                continue
            summary, err = self._compiled_one(mode, pool, reps, warmup)
            if summary is None:
                results[mode] = err
                why = why or err
                continue
            results[mode] = summary["median_ms"]
            if best is None or summary["median_ms"] < best["median_ms"]:
                best = {**summary, "mode": mode}
        if best is None:
            return None, why
        best["modes"] = results
        return best, None

    def graphs_skipped(self, mode: str, pool: list[list[Any]]) -> str | None:
        """Why the CUDA-graph `mode` is not timed on inputs this large (None: it is): its graphs keep static copies
        of the inputs and outputs in a private pool for the evaluator's lifetime (15 GB for a 7.5 GB GroupNorm,
        which the memory plan then lacked), and each call first copies the fresh inputs into them, which at this
        size costs more than every launch the graph saves; its no-graph twin, timed beside it, stands for it."""
        if mode not in GRAPH_MODES or getattr(self.device, "type", None) != "cuda" or not pool:
            return None
        nbytes = sum(x.numel() * x.element_size() for x in pool[0] if isinstance(x, torch.Tensor))
        total = torch.cuda.get_device_properties(self.device).total_memory
        if nbytes <= total * GRAPH_INPUT_MAX_SHARE:
            return None
        return (f"not timed: its CUDA graphs would keep {nbytes / 1e9:.3g} GB of inputs (and the outputs) in static "
                "buffers for the whole run, and copying fresh inputs into them costs more than the launches the graph "
                "saves; the no-graph twin stands for it")

    def _compiled_one(self, mode: str, pool: list[list[Any]], reps: int,
                      warmup: int) -> tuple[dict[str, float] | None, str | None]:
        path = cache_dir() / "baselines" / f"compile-{self.cache_key(pool, mode)}.json"
        if mode not in self._compiled_models and path.exists():
            try:
                return json.loads(path.read_text()), None
            except ValueError:
                pass
        if mode in self._compile_errors:
            return None, self._compile_errors[mode]

        gen = self._closed_gen

        def compile_and_time() -> dict[str, float]:  # runs on the timer's thread (`_on_thread`)
            model = self._compiled_models.get(mode)
            if model is None:
                with tf32_mode(self.ref.precision.allows_tf32):
                    model = torch.compile(self.ref.native, mode=mode)
                if gen == self._closed_gen:  # a timer closed meanwhile keeps no model (nor its graphs' pool)
                    self._compiled_models[mode] = model
            with quiet_inductor():  # the compile (and autotuning) happens at the first call
                return self._time(model, pool, reps, max(warmup, 3)).summary()

        try:
            summary = self._on_thread(compile_and_time)
        except LaneClosed as e:  # the evaluator is closing: not the compile's failure, not remembered as one
            return None, str(e)
        except Exception as e:  # noqa: BLE001 - a reference Inductor cannot compile is reported, not fatal
            err = f"torch.compile ({mode}) failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            self._compile_errors[mode] = err
            log.warning("%s", err)
            return None, err
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary))
        return summary, None
