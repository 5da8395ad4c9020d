"""What a person sees of a run while it runs: the live view's words for what the run is doing now, and the plain
log lines `kernelwright optimize` writes when its output is not a terminal (`nohup … > run.log`, CI, `| tee`).

CLI layer. Everything is read from the run: its run.json, its verdicts, and the driver's `Progress`
(progress.json: the phase, and the model calls in flight that the roles mark through `Models.watch`), so the
same words come out whether the run is driven in this process or followed from another.

A plain log has one line per event, each written (and flushed) as it happens: the run's start, the seed's verdict,
each step, a model call waiting longer than `WAIT_NOTICE_S` (again every `WAIT_REPEAT_S`), and the end (printed
by the command, with the commands to look at the run or resume it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kernelwright.agents.context import RunConfig
from kernelwright.agents.records import StepRecord
from kernelwright.tools.runstore import ModelWait, Progress, Run, RunInfo

__all__ = ["WAIT_NOTICE_S", "WAIT_REPEAT_S", "PlainLog", "duration", "now_rows", "seed_line", "start_line",
           "step_line", "waiting_words"]

WAIT_NOTICE_S = 30.0
"""a model call in flight this long gets a line in a plain log"""
WAIT_REPEAT_S = 60.0
"""and another each time this much longer has passed"""
MAX_WAITS_SHOWN = 4
"""the live view's rows of model calls in flight (a wide generation has many): the oldest, then a count"""


def duration(seconds: float) -> str:
    s = int(round(max(0.0, seconds)))
    h, m = s // 3600, s // 60 % 60
    return f"{h}h{m:02d}m" if h else f"{m}m{s % 60:02d}s" if m else f"{s}s"


def waiting_words(wait: ModelWait, now: float) -> str:
    """'coder (g3b1) waiting on the model for 45 s'."""
    who = f"{wait.role} ({wait.step})" if wait.step else wait.role
    return f"{who} waiting on the model for {duration(now - wait.since)}"


def now_rows(progress: Progress, now: float) -> list[tuple[str, str]]:
    """The live view's rows for what the run is doing now: its phase and how long it has lasted, then the model
    calls in flight, oldest first (the first few, and how many more)."""
    rows: list[tuple[str, str]] = []
    if progress.phase:
        since = f" ({duration(now - progress.phase_since)})" if progress.phase_since else ""
        rows.append(("now", progress.phase + since))
    waits = sorted(progress.waiting, key=lambda w: w.since)
    for i, w in enumerate(waits[:MAX_WAITS_SHOWN]):
        rows.append(("model" if i == 0 else "", waiting_words(w, now)))
    if len(waits) > MAX_WAITS_SHOWN:
        rows.append(("", f"and {len(waits) - MAX_WAITS_SHOWN} more model calls in flight"))
    return rows


# -- the plain log's lines ----------------------------------------------------------------------------------


def _policy(cfg: RunConfig) -> str:
    roles = ", ".join(f"{r}: {m}" for r, m in sorted((cfg.role_models or {}).items()))
    return cfg.model + (f" ({roles})" if roles else "")


def start_line(info: RunInfo, cfg: RunConfig, resumed: bool = False) -> str:
    """The run's first line: its id, problem, device, policy and budgets (and, resumed, where it stood)."""
    where = cfg.device + (f" on the Ray cluster {cfg.cluster}" if cfg.cluster else "")
    head = (f"run {info.id} resumed ({info.status}, {info.steps} steps so far, driven "
            f"{duration(info.active_s or 0.0)})" if resumed else f"run {info.id} started")
    return (f"{head}: problem {info.problem}, device {where}, policy {_policy(cfg)}, "
            f"{cfg.branches} branch{'es' if cfg.branches != 1 else ''}, budget {cfg.budget_words()}"
            + (f", review {cfg.review}" if cfg.review != "none" else ""))


def _timing_words(timing: dict[str, Any] | None, untimed: str | None) -> str:
    if not timing:
        return f", untimed ({untimed})" if untimed else ""
    out = f", median {timing['median_ms']:.4g} ms"
    if timing.get("speedup_vs_eager"):
        out += f", {timing['speedup_vs_eager']:.2f}× eager"
    if timing.get("speedup_vs_compile"):
        out += f", {timing['speedup_vs_compile']:.2f}× torch.compile"
    return out


def seed_line(run: Run) -> str | None:
    """The seed's verdict, once the verifier has given it (None before)."""
    setup = run.info().config
    h = setup.seed_kernel
    data = run.eval(h) if h else None
    if data is None:
        return None
    by = f" (written by {setup.seed_written_by})" if setup.seed_written_by else ""
    verdict = f"{data.get('verdict')} {data.get('reason') or ''}".rstrip()
    if data.get("verdict") != "pass":
        detail = " ".join(str(data.get("detail") or "").split())[:300]
        return f"seed {h[:12]}{by}: {verdict}" + (f": {detail}" if detail else "")  # type: ignore[index]
    return f"seed {h[:12]}{by}: {verdict}" + _timing_words(data.get("timing"), data.get("timing_unavailable"))  # type: ignore[index]


def _best_words(run: Run, info: RunInfo) -> str:
    if not info.best_kernel:
        return "best: none yet"
    data = run.eval(info.best_kernel) or {}
    timing = data.get("timing") or {}
    if not info.best_speedup:
        return f"best {info.best_kernel[:12]} (untimed on this device)"
    compiled = f", {timing['speedup_vs_compile']:.2f}× torch.compile" if timing.get("speedup_vs_compile") else ""
    return f"best {info.best_kernel[:12]}: {info.best_speedup:.2f}× eager{compiled}"


def step_line(step: StepRecord, verdict: str, run: Run, info: RunInfo) -> str:
    """One step: its id, the proposal's key, the verifier's word (`verdict`), the median, the archive's decision
    and the run's best so far, against eager and torch.compile."""
    p = step.proposal
    key = (p.key or p.what) if p else "no proposal"
    result = step.result
    timing = result.timing.model_dump() if result and result.timing else None
    measured = _timing_words(timing, None) if step.verdict == "pass" else ""
    return (f"step {step.step_id}: {' '.join(key.split())[:80]} -> {verdict}{measured}; {step.decision.decision}; "
            f"{_best_words(run, info)}")


class PlainLog:
    """The plain log of one driven run: the start line at `begin`, each step as the driver hands it over
    (`step`), and, from a thread of its own polling the run, the seed's verdict and model calls waiting longer
    than `wait_notice_s` (again every `wait_repeat_s`). Each line goes to `emit` with the time of day."""

    def __init__(self, run: Run, emit: Callable[[str], None], *, wait_notice_s: float = WAIT_NOTICE_S,
                 wait_repeat_s: float = WAIT_REPEAT_S, poll_s: float = 0.5,
                 clock: Callable[[], float] = time.time) -> None:
        self.run, self._emit = run, emit
        self.wait_notice_s, self.wait_repeat_s, self.poll_s, self.clock = wait_notice_s, wait_repeat_s, poll_s, clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seed_told = False
        self._told: dict[tuple[str, str | None, float], float] = {}
        """model calls given a line: (role, step, since) -> how long it had waited at its last line"""

    def line(self, text: str) -> None:
        self._emit(f"{time.strftime('%H:%M:%S', time.localtime(self.clock()))} {text}")

    def begin(self, config: RunConfig, resumed: bool = False) -> None:
        with self._lock:
            self.line(start_line(self.run.info(), config, resumed))
            self._poll()
        self._thread = threading.Thread(target=self._watch, name="kernelwright-plain-log", daemon=True)
        self._thread.start()

    def step(self, step: StepRecord, verdict: str) -> None:
        with self._lock:
            self._poll()  # the seed's verdict (or a long wait) before the step that followed it
            self.line(step_line(step, verdict, self.run, self.run.info()))

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            self._poll()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            with self._lock:
                try:
                    self._poll()
                except Exception:  # noqa: BLE001 - a log line is never worth ending the run
                    continue

    def _poll(self) -> None:
        if not self._seed_told:
            seed = seed_line(self.run)
            if seed is not None:
                self._seed_told = True
                self.line(seed)
        now = self.clock()
        waiting = self.run.progress().waiting
        current = {(w.role, w.step, w.since): w for w in waiting}
        for key, w in current.items():
            waited = now - w.since
            told = self._told.get(key)
            if (told is None and waited >= self.wait_notice_s) or (told is not None
                                                                   and waited - told >= self.wait_repeat_s):
                self._told[key] = waited
                self.line(waiting_words(w, now))
        for key in [k for k in self._told if k not in current]:
            role, step, since = key
            del self._told[key]
            who = f"{role} ({step})" if step else role
            self.line(f"{who}: the model call ended after {duration(now - since)}")
