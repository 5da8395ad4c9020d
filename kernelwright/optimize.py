"""`kernelwright optimize`: set up or resume a run, drive the graph with SQLite checkpoints, show progress.

CLI layer: validates everything the user gave (one sentence per problem, no traceback), creates the run
directory, compiles the graph with a checkpointer in it, streams updates into a live view, and turns the
first Ctrl-C into "finish the generation in flight, checkpoint, stop".
"""

from __future__ import annotations

import re
import signal
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table


class UsageError(Exception):
    """Bad input: the message is one sentence."""


@dataclass
class Summary:
    run_id: str
    status: str
    stop_reason: str | None
    best_path: str | None
    best_speedup: float | None


def parse_duration(text: str) -> float:
    """'90', '90s', '30m', '8h', '1h30m' -> seconds."""
    parts = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*", text)
    if not text.strip() or not parts or not any(parts.groups()):
        raise UsageError(f"--time-budget {text!r}: use a duration like 90s, 30m or 8h")
    h, m, s = (float(g) if g else 0.0 for g in parts.groups())
    return h * 3600 + m * 60 + s


def run_optimize(*, problem: Path | None, seed_kernel: Path | None, model: str, base_url: str | None,
                 role_models: list[str], iterations: int, time_budget: str | None, branches: int, device: str | None,
                 precision: str | None, trials: int, run_dir: Path, resume: str | None,
                 console: Console) -> Summary:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from kernelwright.agents import roles
    from kernelwright.evaluators import DeviceError, ProblemError, load_problem, resolve_device
    from kernelwright.graphs.optimize import builder, initial_state
    from kernelwright.graphs.state import Context
    from kernelwright.runstore import RunError, RunStore
    from kernelwright.tools.evaluation import close_all

    store = RunStore(run_dir)
    if model != "builtin" or role_models or base_url:
        raise UsageError("language-model policies are not available in this version yet: use --model builtin")
    if resume:
        try:
            run = store.open(resume)
        except RunError as e:
            raise UsageError(str(e)) from None
        ctx = Context(**run.info().config["context"])
        state: Any = None
    else:
        if problem is None:
            raise UsageError("give a problem file (or --resume RUN_ID)")
        if seed_kernel is None:
            raise UsageError("the builtin policy improves an existing kernel: give one with --seed-kernel FILE")
        if not seed_kernel.is_file():
            raise UsageError(f"{seed_kernel}: no such seed kernel file")
        try:
            prob = load_problem(problem, precision)
            dev = resolve_device(device.split(",")[0] if device else None)
        except (ProblemError, DeviceError) as e:
            raise UsageError(str(e)) from None
        budget = parse_duration(time_budget) if time_budget else None
        ctx = Context(device=str(dev), precision=precision, branches=branches, iterations=iterations,
                      time_budget_s=budget, trials=trials, model=model)
        run = store.create(str(problem), prob.source, {})
        h = run.put_kernel(seed_kernel.read_text())
        run.update(config={"seed_kernel": h, "seed_path": str(seed_kernel), "context": asdict(ctx)})
        state = initial_state(str(run.path))

    conn = sqlite3.connect(str(run.checkpoint_path), check_same_thread=False)
    graph = builder().compile(checkpointer=SqliteSaver(conn))
    config = {"configurable": {"thread_id": run.id}, "recursion_limit": 10_000}
    if state is None and not graph.get_state(config).values:
        state = initial_state(str(run.path))  # killed before its first checkpoint: start it over
    roles.reset_stop()
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum: int, frame: Any) -> None:
        console.print("[yellow]stopping after the generation in flight (Ctrl-C again to abort)…[/]")
        roles.request_stop()
        signal.signal(signal.SIGINT, previous if callable(previous) else signal.default_int_handler)

    signal.signal(signal.SIGINT, on_sigint)
    try:
        with Live(_view(run.info(), None), console=console, refresh_per_second=4, transient=False) as live:
            for update in graph.stream(state, config, context=ctx, stream_mode="updates"):
                last = _last_verdict(update)
                live.update(_view(run.info(), last))
    except KeyboardInterrupt:
        run.update(status="interrupted", stop_reason="aborted by a second Ctrl-C; resume with --resume")
    finally:
        signal.signal(signal.SIGINT, previous)
        close_all()
        conn.close()
    info = run.info()
    best = str(run.kernel_path(info.best_kernel)) if info.best_kernel else None
    return Summary(info.id, info.status, info.stop_reason, best, info.best_speedup)


def _last_verdict(update: dict[str, Any]) -> str | None:
    for node, value in update.items():
        if node == "branch" and isinstance(value, dict):
            for r in value.get("results") or []:
                p = (r.get("proposal") or {}).get("what", "no proposal")
                return f"{r['step_id']}: {p} -> {r.get('verdict')} {(r.get('result') or {}).get('reason', '')}"
    return None


def _view(info: Any, last: str | None) -> Table:
    t = Table(box=None, show_header=False)
    t.add_row("run", info.id)
    t.add_row("status", info.status)
    ctx = info.config.get("context", {})
    t.add_row("steps", f"{info.steps} / {ctx.get('iterations', '?')}")
    t.add_row("best", f"{info.best_speedup:.3f}× eager" if info.best_speedup else "seed (untimed on the CPU)"
              if ctx.get("device") == "cpu" else "seed")
    if last:
        t.add_row("last step", last)
    return t
