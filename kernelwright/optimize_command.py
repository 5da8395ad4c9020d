"""`kernelwright optimize`: the command's flags turned into a run, driven through `kernelwright.api`.

CLI layer: parses what the user gave (one sentence per problem, no traceback), starts or resumes the run
through the API (which checks the config, creates the run directory and checkpoints in it), shows its progress
(a live view in a terminal, naming what the run is doing now; otherwise one plain line per event, `progress`),
and turns the first Ctrl-C into "finish the generation in flight, checkpoint, stop".
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
from kernelwright import progress as prog
from kernelwright.api import UsageError

__all__ = ["Summary", "UsageError", "end_lines", "parse_duration", "parse_prices", "parse_role_models", "run_optimize"]


@dataclass
class Summary:
    run_id: str
    status: str
    stop_reason: str | None
    best_path: str | None
    best_speedup: float | None
    latest_unmeasured: str | None = None
    """the newest verified child that could not be timed (CPU runs), when the best kernel is untimed too"""
    resumable: bool = False
    """`kernelwright optimize --resume RUN_ID` continues the run (stopped, failed on a provider, interrupted)"""

    @property
    def exit_code(self) -> int:
        """0 when the run ended as asked with a verified kernel; 1 when it failed (a provider down past the retry
        window, a rejected seed) or has no verified kernel; 130 when a second Ctrl-C aborted it."""
        if self.status == "interrupted":
            return 130
        return 1 if self.status == "failed" or not self.best_path else 0


def resume_command(run_id: str, run_dir: Path | str = "runs") -> str:
    """The command that continues a run, with the runs folder when it is not the default one."""
    where = "" if Path(run_dir) == Path("runs") else f" --run-dir {run_dir}"
    return f"kernelwright optimize --resume {run_id}{where}"


def end_lines(summary: Summary, run_dir: Path | str = "runs") -> list[str]:
    """What optimize prints when the run ends: its status and why, its best kernel (never a rejected seed: a run
    without a verified kernel has none), and the command that resumes it where it can be resumed."""
    lines = [f"run {summary.run_id}: {summary.status}" + (f" ({summary.stop_reason})" if summary.stop_reason else "")]
    if summary.best_path:
        speed = f", {summary.best_speedup:.2f}× eager" if summary.best_speedup else ""
        lines.append(f"best kernel: {summary.best_path}{speed}")
    if summary.latest_unmeasured:
        lines.append(f"latest verified kernel (not timed on this device; a GPU run can measure it): "
                     f"{summary.latest_unmeasured}")
    if summary.resumable:
        lines.append(f"resume: {resume_command(summary.run_id, run_dir)}")
    return lines


def parse_duration(text: str, flag: str = "--time-budget") -> float:
    """'90', '90s', '30m', '8h', '1h30m' -> seconds; UsageError naming `flag` for anything else."""
    parts = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*", text)
    if not text.strip() or not parts or not any(parts.groups()):
        raise UsageError(f"{flag} {text!r}: use a duration like 90s, 30m or 8h")
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


def run_optimize(*, problem: Path | None, seed_kernel: Path | None, run_dir: Path, resume: str | None, console: Console,
                 config: api.RunConfig | None = None, models: dict[str, Any] | None = None, device: str | None = None,
                 cluster: str | None = None, actors: int | None = None, hosts: str | None = None,
                 wait_notice_s: float = prog.WAIT_NOTICE_S, wait_repeat_s: float = prog.WAIT_REPEAT_S,
                 **settings: Any) -> Summary:
    """`kernelwright optimize`: a new run with `config` (the command's flags make it, `cli.run_settings`), or one
    resumed (moved to `device`, `cluster` and `actors`, hosted as `hosts` says, where given), driven through the API
    with a live view when `console` is a terminal, else a plain log (one line per event, a model call waiting longer
    than `wait_notice_s` included); the first Ctrl-C asks it to stop after the generation in flight. Without
    `config`, `settings` are optimize's flags by name (branches=2, time_budget="8h", role_models=[...]), read as the
    command reads them (`cli.settings_config`); a setting left out takes RunConfig's default."""
    if resume:
        handle = api.resume_run(resume, runs_dir=run_dir, models=models, device=device, cluster=cluster, actors=actors,
                                hosts=hosts)
    else:
        if problem is None:
            raise UsageError("give a problem file (or --resume RUN_ID)")
        if not problem.is_file():  # the problem first: without it no seed matters
            raise UsageError(f"{problem}: no such problem file")
        if seed_kernel is not None and not seed_kernel.is_file():
            raise UsageError(f"{seed_kernel}: no such seed kernel file")
        if config is None:
            from kernelwright.cli import settings_config

            config = settings_config("optimize", {"device": device, "cluster": cluster, "actors": actors,
                                                  "hosts": hosts, **settings})
        handle = api.start_run(problem, seed_kernel=seed_kernel, config=config, runs_dir=run_dir, models=models)
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum: int, frame: Any) -> None:
        console.print("[yellow]stopping after the generation in flight (Ctrl-C again to abort)…[/]")
        handle.request_stop()
        signal.signal(signal.SIGINT, previous if callable(previous) else signal.default_int_handler)

    signal.signal(signal.SIGINT, on_sigint)
    last: list[str | None] = [None]
    try:
        if console.is_terminal:
            with Live(get_renderable=lambda: _view(handle.info(), last[0], handle.run.progress(), time.time(),
                                                   handle.context.active_seconds()),
                      console=console, refresh_per_second=4, transient=False):
                for step in handle.steps("optimize"):
                    last[0] = _describe(step)
            console.print()
        else:  # a log, a pipe, CI: a live view would print once, at the end; lines come as things happen
            log = prog.PlainLog(handle.run, lambda line: console.print(line, markup=False, highlight=False,
                                                                       soft_wrap=True),
                                wait_notice_s=wait_notice_s, wait_repeat_s=wait_repeat_s)
            log.begin(handle.config, resumed=bool(resume))
            try:
                for step in handle.steps("optimize"):
                    log.step(step, verdict_words(step))
            finally:
                log.close()
    except KeyboardInterrupt:
        handle.run.update(status="interrupted", stop_reason="aborted by a second Ctrl-C in the middle of a generation",
                          resumable=True)
    finally:
        signal.signal(signal.SIGINT, previous)
        handle.close()
    info = handle.info()
    best = str(handle.run.kernel_path(info.best_kernel)) if info.best_kernel else None
    archive = api.RunView(handle.run).archive()
    latest = archive.unmeasured[-1] if archive is not None and archive.unmeasured else None
    return Summary(info.id, info.status, info.stop_reason, best, info.best_speedup,
                   str(handle.run.kernel_path(latest)) if latest and info.best_speedup is None else None,
                   resumable=info.resumable)


def _best_words(info: api.RunInfo, cfg: api.RunConfig) -> str:
    """The live view's best kernel: a seed is named only once the verifier passed it (before that, or when it
    was rejected, there is no best kernel)."""
    if info.best_kernel is None:
        return "none yet (the seed is being verified)" if info.status in ("created", "running") else "none"
    if info.best_speedup:
        return f"{info.best_speedup:.3f}× eager"
    return "the verified seed (untimed on the CPU)" if cfg.on_cpu else "the verified seed"


def no_child_why(step: api.StepRecord) -> str:
    """Why a step made no child, in one sentence: the model provider's failure first (it explains the rest),
    then the coder's error or note, a model's unusable answers, or the archive's word."""
    down = [u.error for u in step.llm.values() if u.error and u.error_kind == "provider"]
    other = [u.error for u in step.llm.values() if u.error]
    return (down[0] if down else None) or step.coder.error or step.coder.note or (other[0] if other else None) \
        or step.decision.why


def verdict_words(step: api.StepRecord) -> str:
    """The verifier's word on a step, also when there was no child to judge (never a bare None)."""
    if step.verdict is None:
        return f"not run (no child: {no_child_why(step)})"
    return f"{step.verdict} {step.result.reason if step.result else ''}".rstrip()


def _describe(step: api.StepRecord) -> str:
    what = step.proposal.what if step.proposal else "no proposal"
    return f"{step.step_id}: {what} -> {verdict_words(step)}"


def runs_lines(infos: list[api.RunInfo], width: int | None = None, driver_gone: set[str] | None = None) -> list[str]:
    """`kernelwright runs` as plain columns: id, problem, status, steps, best speedup (a dash where there is
    nothing). The id is never cut: it is what every other command needs. `width` (a terminal's) shortens only the
    problem's path, from its left, so the line fits; None (piped) cuts nothing. A run in `driver_gone` (status
    running, its driver's process dead) shows as interrupted, as a run aborted mid-generation does: resumable."""
    header = ["id", "problem", "status", "steps", "best speedup"]
    gone = driver_gone or set()
    rows = [[i.id, i.problem, "interrupted" if i.id in gone else i.status, str(i.steps),
             f"{i.best_speedup:.2f}×" if i.best_speedup else "-"] for i in infos]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    if width is not None:
        room = width - (sum(widths) - widths[1]) - 2 * (len(header) - 1)
        if room < widths[1]:
            widths[1] = max(len(header[1]), room, 12)
            for r in rows:
                if len(r[1]) > widths[1]:
                    r[1] = "…" + r[1][-(widths[1] - 1):]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]



def _elapsed_s(created: str) -> float | None:
    try:
        return max(0.0, time.time() - time.mktime(time.strptime(created, "%Y-%m-%dT%H:%M:%S")))
    except (ValueError, TypeError):
        return None


def _view(info: api.RunInfo, last: str | None, progress: api.Progress | None = None, now: float | None = None,
          active_s: float | None = None) -> Table:
    """The live view: the run, its status, steps, best kernel and time (`active_s`: how long it has been
    driven, what the time budget counts), what it is doing now (`progress`: the phase, the model calls in
    flight and for how long), its model use and its last step."""
    t = Table(box=None, show_header=False)
    t.add_row("run", info.id)
    t.add_row("status", info.status)
    cfg = api.RunConfig.from_dict(info.config.settings)
    budget = cfg.step_budget()
    t.add_row("steps", f"{info.steps} / {budget}" if budget is not None else f"{info.steps} (no step limit)")
    t.add_row("best", _best_words(info, cfg))
    now = time.time() if now is None else now
    for label, words in prog.now_rows(progress or api.Progress(), now):
        t.add_row(label, words)
    # the time the budget counts; a run.json of an earlier version has only its creation time
    elapsed = active_s if active_s is not None else info.active_s if info.active_s is not None \
        else _elapsed_s(info.created)
    if elapsed is not None:
        limit = cfg.time_budget_s
        t.add_row("time", prog.duration(elapsed) + (f" / {prog.duration(limit)}" if limit else ""))
    if info.tokens or cfg.token_budget or cfg.cost_budget_usd:
        budget = f" / {cfg.token_budget}" if cfg.token_budget else ""
        cost = f" / ${cfg.cost_budget_usd:.2f}" if cfg.cost_budget_usd else ""
        t.add_row("model use", f"{info.tokens}{budget} tokens, ${info.cost_usd:.4f}{cost}")
    if last:
        t.add_row("last step", last)
    if info.status == "awaiting review":
        t.add_row("review", f"{info.stop_reason}: kernelwright chat --attach {info.id}")
    return t
