"""`kernelwright optimize`: the command's flags turned into a run, driven through `kernelwright.api`.

CLI layer: parses what the user gave (one sentence per problem, no traceback), starts or resumes the run
through the API (which checks the config, creates the run directory and checkpoints in it), shows a live
view, and turns the first Ctrl-C into "finish the generation in flight, checkpoint, stop".
"""

from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from kernelwright import api
from kernelwright.api import UsageError

__all__ = ["Summary", "UsageError", "parse_duration", "parse_prices", "parse_role_models", "run_optimize"]


@dataclass
class Summary:
    run_id: str
    status: str
    stop_reason: str | None
    best_path: str | None
    best_speedup: float | None
    latest_unmeasured: str | None = None
    """the newest verified child that could not be timed (CPU runs), when the best kernel is untimed too"""


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


def build_config(*, model: str, base_url: str | None, role_models: list[str], iterations: int,
                 time_budget: str | None, branches: int, device: str | None, precision: str | None, trials: int,
                 token_budget: int | None, cost_budget: float | None, prices: list[str] | None, profile: str,
                 review: str, cluster: str | None = None, actors: int | None = None,
                 hosts: str = "auto") -> api.RunConfig:
    """optimize's (and chat's) flags as a RunConfig; UsageError, one sentence, for a bad one."""
    return api.RunConfig(device=device or "", cluster=cluster or "", actors=actors or 0,
                         precision=precision, branches=branches, iterations=iterations,
                         time_budget_s=parse_duration(time_budget) if time_budget else None, trials=trials,
                         model=model, base_url=base_url, role_models=parse_role_models(role_models),
                         token_budget=token_budget, cost_budget_usd=cost_budget, prices=parse_prices(prices or []),
                         profile=profile, review=review, hosts=hosts)


def run_optimize(*, problem: Path | None, seed_kernel: Path | None, model: str, base_url: str | None,
                 role_models: list[str], iterations: int, time_budget: str | None, branches: int, device: str | None,
                 precision: str | None, trials: int, run_dir: Path, resume: str | None,
                 console: Console, token_budget: int | None = None, cost_budget: float | None = None,
                 prices: list[str] | None = None, models: dict[str, Any] | None = None,
                 profile: str = "auto", review: str = "none", cluster: str | None = None,
                 actors: int | None = None, hosts: str | None = None) -> Summary:
    """`kernelwright optimize`: the flags become a RunConfig, the run is driven through the API with a live
    view, and the first Ctrl-C asks it to stop after the generation in flight."""
    if resume:
        handle = api.resume_run(resume, runs_dir=run_dir, models=models, device=device, cluster=cluster, actors=actors,
                                hosts=hosts)
    else:
        if problem is None:
            raise UsageError("give a problem file (or --resume RUN_ID)")
        if seed_kernel is not None and not seed_kernel.is_file():
            raise UsageError(f"{seed_kernel}: no such seed kernel file")
        config = build_config(model=model, base_url=base_url, role_models=role_models, iterations=iterations,
                              time_budget=time_budget, branches=branches, device=device, precision=precision,
                              trials=trials, token_budget=token_budget, cost_budget=cost_budget, prices=prices,
                              profile=profile, review=review, cluster=cluster, actors=actors, hosts=hosts or "auto")
        handle = api.start_run(problem, seed_kernel=seed_kernel, config=config, runs_dir=run_dir, models=models)
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum: int, frame: Any) -> None:
        console.print("[yellow]stopping after the generation in flight (Ctrl-C again to abort)…[/]")
        handle.request_stop()
        signal.signal(signal.SIGINT, previous if callable(previous) else signal.default_int_handler)

    signal.signal(signal.SIGINT, on_sigint)
    last: list[str | None] = [None]
    try:
        with Live(get_renderable=lambda: _view(handle.info(), last[0]), console=console, refresh_per_second=4,
                  transient=False):
            for step in handle.steps("optimize"):
                last[0] = _describe(step)
        console.print()
    except KeyboardInterrupt:
        handle.run.update(status="interrupted", stop_reason="aborted by a second Ctrl-C; resume with --resume")
    finally:
        signal.signal(signal.SIGINT, previous)
        handle.close()
    info = handle.info()
    best = str(handle.run.kernel_path(info.best_kernel)) if info.best_kernel else None
    archive = api.RunView(handle.run).archive()
    latest = archive.unmeasured[-1] if archive is not None and archive.unmeasured else None
    return Summary(info.id, info.status, info.stop_reason, best, info.best_speedup,
                   str(handle.run.kernel_path(latest)) if latest and info.best_speedup is None else None)


def _describe(step: api.StepRecord) -> str:
    what = step.proposal.what if step.proposal else "no proposal"
    return f"{step.step_id}: {what} -> {step.verdict} {step.result.reason if step.result else ''}"


def _elapsed_s(created: str) -> float | None:
    try:
        return max(0.0, time.time() - time.mktime(time.strptime(created, "%Y-%m-%dT%H:%M:%S")))
    except (ValueError, TypeError):
        return None


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    h, m = s // 3600, s // 60 % 60
    return f"{h}h{m:02d}m" if h else f"{m}m{s % 60:02d}s" if m else f"{s}s"


def _view(info: api.RunInfo, last: str | None) -> Table:
    t = Table(box=None, show_header=False)
    t.add_row("run", info.id)
    t.add_row("status", info.status)
    cfg = api.RunConfig.from_dict(info.config.context)
    t.add_row("steps", f"{info.steps} / {cfg.iterations}")
    t.add_row("best", f"{info.best_speedup:.3f}× eager" if info.best_speedup else "seed (untimed on the CPU)"
              if cfg.device == "cpu" else "seed")
    elapsed = _elapsed_s(info.created)
    if elapsed is not None:
        limit = cfg.time_budget_s
        t.add_row("time", _duration(elapsed) + (f" / {_duration(limit)}" if limit else ""))
    if info.tokens or cfg.token_budget or cfg.cost_budget_usd:
        budget = f" / {cfg.token_budget}" if cfg.token_budget else ""
        cost = f" / ${cfg.cost_budget_usd:.2f}" if cfg.cost_budget_usd else ""
        t.add_row("model use", f"{info.tokens}{budget} tokens, ${info.cost_usd:.4f}{cost}")
    if last:
        t.add_row("last step", last)
    if info.status == "awaiting review":
        t.add_row("review", f"{info.stop_reason}: kernelwright chat --attach {info.id}")
    return t
