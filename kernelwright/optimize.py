"""`kernelwright optimize`: set up or resume a run, drive the graph with SQLite checkpoints, show progress.

CLI layer: validates everything the user gave (one sentence per problem, no traceback), creates the run
directory, compiles the graph with a checkpointer in it, streams updates into a live view, and turns the
first Ctrl-C into "finish the generation in flight, checkpoint, stop".
"""

from __future__ import annotations

import re
import signal
import sqlite3
import time
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


def parse_role_models(items: list[str]) -> dict[str, str]:
    """['strategist=openai:gpt-4.1', ...] -> {'strategist': 'openai:gpt-4.1'}; one sentence per bad item."""
    from kernelwright.agents.llm import ROLES, valid_spec

    out: dict[str, str] = {}
    for item in items:
        role, eq, spec = item.partition("=")
        role, spec = role.strip(), spec.strip()
        if not eq or role not in ROLES:
            raise UsageError(f"--role-model {item!r}: use ROLE=provider:model with ROLE one of {', '.join(ROLES)}")
        if spec != "builtin" and not valid_spec(spec):
            raise UsageError(f"--role-model {item!r}: the model must be builtin or provider:model, e.g. openai:gpt-4.1")
        out[role] = spec
    return out


def parse_prices(items: list[str]) -> dict[str, list[float]]:
    """['openai:gpt-4.1=2/8', ...] -> {'openai:gpt-4.1': [2.0, 8.0]} (USD per million input/output tokens)."""
    out: dict[str, list[float]] = {}
    for item in items:
        spec, eq, rates = item.rpartition("=")
        parts = rates.split("/")
        try:
            values = [float(v) for v in parts]
        except ValueError:
            values = []
        if not eq or not spec.strip() or len(values) != 2 or min(values) < 0:
            raise UsageError(f"--price {item!r}: use provider:model=IN/OUT in USD per million tokens, "
                             "e.g. openai:gpt-4.1=2/8")
        out[spec.strip()] = values
    return out


def check_budgets(token_budget: int | None, cost_budget: float | None, model: str, per_role: dict[str, str],
                  prices: dict[str, list[float]]) -> None:
    specs = sorted({s for s in [model, *per_role.values()] if s != "builtin"})
    if (token_budget is not None or cost_budget is not None) and not specs:
        raise UsageError("--token-budget and --cost-budget limit model calls: the builtin policy makes none")
    if cost_budget is not None:
        unpriced = [s for s in specs if s not in prices]
        if unpriced:
            raise UsageError(f"--cost-budget needs the price of {unpriced[0]}: give --price {unpriced[0]}=IN/OUT "
                             "(USD per million input/output tokens)")


def check_models(model: str, per_role: dict[str, str], base_url: str | None) -> None:
    """Every model named must be well formed and constructible (provider package installed, key present)."""
    from kernelwright.agents.llm import ProviderError, chat_model, valid_spec

    if model != "builtin" and not valid_spec(model):
        raise UsageError(f"--model {model!r}: use builtin or provider:model, e.g. openai:gpt-4.1")
    specs = {s for s in [model, *per_role.values()] if s != "builtin"}
    if base_url and not specs:
        raise UsageError("--base-url needs a model: give one with --model provider:model")
    if base_url and not re.match(r"^https?://", base_url):
        raise UsageError(f"--base-url {base_url!r}: give an http:// or https:// URL")
    for spec in sorted(specs):
        try:
            chat_model(spec, base_url)
        except ProviderError as e:
            raise UsageError(str(e)) from None


def run_optimize(*, problem: Path | None, seed_kernel: Path | None, model: str, base_url: str | None,
                 role_models: list[str], iterations: int, time_budget: str | None, branches: int, device: str | None,
                 precision: str | None, trials: int, run_dir: Path, resume: str | None,
                 console: Console, token_budget: int | None = None, cost_budget: float | None = None,
                 prices: list[str] | None = None) -> Summary:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from kernelwright.agents import roles
    from kernelwright.evaluators import DeviceError, ProblemError, load_problem, resolve_device
    from kernelwright.graphs.optimize import builder, initial_state
    from kernelwright.graphs.state import Context
    from kernelwright.runstore import RunError, RunStore
    from kernelwright.tools.evaluation import close_all

    store = RunStore(run_dir)
    per_role = parse_role_models(role_models)
    price_table = parse_prices(prices or [])
    if not resume:
        check_models(model, per_role, base_url)
        check_budgets(token_budget, cost_budget, model, per_role, price_table)
    if resume:
        try:
            run = store.open(resume)
        except RunError as e:
            raise UsageError(str(e)) from None
        ctx = Context(**run.info().config["context"])
        check_models(ctx.model, ctx.role_models, ctx.base_url)
        state: Any = None
    else:
        if problem is None:
            raise UsageError("give a problem file (or --resume RUN_ID)")
        if seed_kernel is None and per_role.get("coder", model) == "builtin":
            raise UsageError("the builtin policy improves an existing kernel: give one with --seed-kernel FILE")
        if seed_kernel is not None and not seed_kernel.is_file():
            raise UsageError(f"{seed_kernel}: no such seed kernel file")
        try:
            prob = load_problem(problem, precision)
            devs = [resolve_device(d.strip()) for d in device.split(",")] if device else [resolve_device(None)]
        except (ProblemError, DeviceError) as e:
            raise UsageError(str(e)) from None
        if len({d.type for d in devs}) > 1:
            raise UsageError(f"--device {device}: list GPUs only (cuda:0,cuda:1) or cpu, not a mix")
        dev = ",".join(dict.fromkeys(str(d) for d in devs))
        budget = parse_duration(time_budget) if time_budget else None
        ctx = Context(device=str(dev), precision=precision, branches=branches, iterations=iterations,
                      time_budget_s=budget, trials=trials, model=model, base_url=base_url, role_models=per_role,
                      token_budget=token_budget, cost_budget_usd=cost_budget, prices=price_table)
        run = store.create(str(problem), prob.source, {})
        # without a seed kernel, the coder's model writes the first generation from the reference
        h = run.put_kernel(seed_kernel.read_text()) if seed_kernel else None
        run.update(config={"seed_kernel": h, "seed_path": str(seed_kernel) if seed_kernel else None,
                           "context": asdict(ctx)})
        state = initial_state(str(run.path))

    from kernelwright.agents import llm

    llm.PRICES.update({k: (v[0], v[1]) for k, v in (ctx.prices or {}).items()})
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
        console.print()
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


def _elapsed_s(created: str) -> float | None:
    try:
        return max(0.0, time.time() - time.mktime(time.strptime(created, "%Y-%m-%dT%H:%M:%S")))
    except (ValueError, TypeError):
        return None


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    h, m = s // 3600, s // 60 % 60
    return f"{h}h{m:02d}m" if h else f"{m}m{s % 60:02d}s" if m else f"{s}s"


def _view(info: Any, last: str | None) -> Table:
    t = Table(box=None, show_header=False)
    t.add_row("run", info.id)
    t.add_row("status", info.status)
    ctx = info.config.get("context", {})
    t.add_row("steps", f"{info.steps} / {ctx.get('iterations', '?')}")
    t.add_row("best", f"{info.best_speedup:.3f}× eager" if info.best_speedup else "seed (untimed on the CPU)"
              if ctx.get("device") == "cpu" else "seed")
    elapsed = _elapsed_s(info.created)
    if elapsed is not None:
        limit = ctx.get("time_budget_s")
        t.add_row("time", _duration(elapsed) + (f" / {_duration(limit)}" if limit else ""))
    if info.tokens or ctx.get("token_budget") or ctx.get("cost_budget_usd"):
        budget = f" / {ctx['token_budget']}" if ctx.get("token_budget") else ""
        cost = f" / ${ctx['cost_budget_usd']:.2f}" if ctx.get("cost_budget_usd") else ""
        t.add_row("model use", f"{info.tokens}{budget} tokens, ${info.cost_usd:.4f}{cost}")
    if last:
        t.add_row("last step", last)
    return t
