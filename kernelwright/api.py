"""kernelwright from Python: evaluate a candidate, start or resume a run and iterate over its steps,
request a stop, open a finished run and read its steps, archive and best kernel.

The CLI is built on these functions, and so are the chat, MCP, report, export and benchmark features:
whatever drives a run gets the same behaviour. Everything a run holds (its evaluators, model clients,
prices and stop request) belongs to its `RunHandle`, so several runs can live in one process.

    from kernelwright import api

    result = api.evaluate("problem.py", "candidate.py", device="cuda")
    with api.start_run("problem.py", seed_kernel="seed.py", config=api.RunConfig(iterations=8)) as run:
        for step in run.steps():
            print(step.step_id, step.proposal and step.proposal.what, step.verdict)
    print(run.info().best_speedup)
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from kernelwright.agents.archive import Archive
from kernelwright.agents.context import RunConfig, RunContext
from kernelwright.agents.llm import ROLES, ProviderError, valid_spec
from kernelwright.agents.records import StepRecord
from kernelwright.agents.roles import STOPPED_ON_REQUEST
from kernelwright.evaluators import (DeviceError, EvalPolicy, EvalResult, Evaluator, ProblemError, load_problem,
                                     resolve_device)
from kernelwright.tools.runstore import Run, RunError, RunInfo, RunStore

__all__ = ["Archive", "BestKernel", "RunConfig", "RunHandle", "RunInfo", "RunView", "StepRecord", "UsageError",
           "evaluate", "open_run", "resume_run", "start_run"]


class UsageError(Exception):
    """Bad input from the caller (a flag, a file, a config); the message is one sentence."""


# -- evaluation -------------------------------------------------------------------------------------------


def evaluate(problem: str | Path, candidate: str | Path, *, device: str | None = None, precision: str | None = None,
             trials: int = 5, compile_mode: str | None = "default") -> EvalResult:
    """Judge one candidate (a file path, or its source text) against a problem file. Never raises for a
    bad candidate: the verdict says why. Raises UsageError for a bad problem file or an unusable device."""
    source = _source(candidate, "candidate")
    try:
        prob = load_problem(Path(problem), precision)
        dev = resolve_device(device)
    except (ProblemError, DeviceError) as e:
        raise UsageError(str(e)) from None
    with Evaluator(prob, str(dev), EvalPolicy(trials=trials, compile_mode=compile_mode)) as ev:
        return ev.evaluate(source)


def _is_path(given: str | Path) -> bool:
    """A Path, or a string that names a file rather than holding source text."""
    return isinstance(given, Path) or ("\n" not in given and given.endswith(".py"))


def _source(given: str | Path, what: str) -> str:
    if _is_path(given):
        path = Path(given)
        if not path.is_file():
            raise UsageError(f"{path}: no such {what} file")
        try:
            return path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"{path}: cannot be read ({e})") from None
    return given


# -- checking a run's configuration -----------------------------------------------------------------------


def check_config(config: RunConfig, models: dict[str, BaseChatModel] | None = None, *,
                 build_models: bool = True) -> None:
    """Every model named must be well formed (and, with `build_models`, constructible: provider package
    installed, key present); budgets must make sense. UsageError with one sentence otherwise."""
    specs = sorted({s for s in [config.model, *config.role_models.values()] if s != "builtin"})
    if config.model != "builtin" and not valid_spec(config.model):
        raise UsageError(f"--model {config.model!r}: use builtin or provider:model, e.g. openai:gpt-4.1")
    for role, spec in config.role_models.items():
        if role not in ROLES:
            raise UsageError(f"--role-model {role}={spec}: use ROLE=provider:model with ROLE one of {', '.join(ROLES)}")
        if spec != "builtin" and not valid_spec(spec):
            raise UsageError(f"--role-model {role}={spec}: the model must be builtin or provider:model, "
                             "e.g. openai:gpt-4.1")
    if config.base_url and not specs:
        raise UsageError("--base-url needs a model: give one with --model provider:model")
    if config.base_url and not re.match(r"^https?://", config.base_url):
        raise UsageError(f"--base-url {config.base_url!r}: give an http:// or https:// URL")
    if (config.token_budget is not None or config.cost_budget_usd is not None) and not specs:
        raise UsageError("--token-budget and --cost-budget limit model calls: the builtin policy makes none")
    if config.cost_budget_usd is not None:
        unpriced = [s for s in specs if s not in config.prices]
        if unpriced:
            raise UsageError(f"--cost-budget needs the price of {unpriced[0]}: give --price {unpriced[0]}=IN/OUT "
                             "(USD per million input/output tokens)")
    if build_models:
        from kernelwright.agents.llm import Models

        built = Models(config.base_url, config.prices, models)
        for spec in specs:
            try:
                built.chat_model(spec)
            except ProviderError as e:
                raise UsageError(str(e)) from None


# -- runs -------------------------------------------------------------------------------------------------


class RunHandle:
    """A run this process drives. `steps()` advances it and yields each step as it is recorded;
    `request_stop()` (from any thread, a signal handler, a chat command) stops it after the generation in
    flight, checkpointed, so `resume_run` can continue it. Close it (or use `with`) to stop its workers."""

    def __init__(self, run: Run, config: RunConfig, models: dict[str, BaseChatModel] | None, fresh: bool) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        from kernelwright.graphs.optimize import builder

        self.run = run
        self.config = config
        self.context = RunContext.open(config, run, models)
        self._conn = sqlite3.connect(str(run.checkpoint_path), check_same_thread=False)
        self._graph = builder().compile(checkpointer=SqliteSaver(self._conn))
        self._thread = {"configurable": {"thread_id": run.id}, "recursion_limit": 10_000}
        self._fresh = fresh
        self._closed = False

    @property
    def id(self) -> str:
        return self.run.id

    @property
    def path(self) -> Path:
        return self.run.path

    def info(self) -> RunInfo:
        return self.run.info()

    def request_stop(self) -> None:
        self.context.request_stop()

    def steps(self) -> Iterator[StepRecord]:
        """Drive the run until it stops, yielding each step record once it is in the trace."""
        from kernelwright.graphs.optimize import initial_state

        state: Any = None
        saved = self._graph.get_state(self._thread)
        if self._fresh or not saved.values:
            state = initial_state()  # a new run, or one killed before its first checkpoint: start it over
        elif saved.values.get("stop") == STOPPED_ON_REQUEST and not saved.next:
            # stopped on request after a generation: take the stop back, so the graph goes on from there
            self._graph.update_state(self._thread, {"stop": None}, as_node="archive")
            self.run.update(status="running", stop_reason=None)
        self._fresh = False
        seen = len(self.run.trace())
        for _update in self._graph.stream(state, self._thread, context=self.context, stream_mode="updates"):
            records = self.run.trace()
            for r in records[seen:]:
                yield StepRecord.model_validate(r)
            seen = len(records)

    def run_to_end(self) -> RunInfo:
        """Drive the run until it stops; its final metadata."""
        for _ in self.steps():
            pass
        return self.info()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.context.close()
        finally:
            self._conn.close()

    def __enter__(self) -> RunHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_run(problem: str | Path, *, seed_kernel: str | Path | None = None, config: RunConfig | None = None,
              runs_dir: str | Path = "runs", models: dict[str, BaseChatModel] | None = None) -> RunHandle:
    """Create a run directory and return its handle (nothing runs until `steps()` or `run_to_end()`).

    `seed_kernel` is a file path or source text; without one, the coder's model writes the first kernels.
    `models` gives ready chat models by spec (a scripted model, a client built by the application)."""
    config = config or RunConfig()
    check_config(config, models)
    if seed_kernel is None and config.model_for("coder") == "builtin":
        raise UsageError("the builtin policy improves an existing kernel: give one with --seed-kernel FILE")
    seed_src = _source(seed_kernel, "seed kernel") if seed_kernel is not None else None
    try:
        prob = load_problem(Path(problem), config.precision)
        devs = [resolve_device(d.strip()) for d in config.device.split(",")] if config.device else [resolve_device(None)]
    except (ProblemError, DeviceError) as e:
        raise UsageError(str(e)) from None
    if len({d.type for d in devs}) > 1:
        raise UsageError(f"--device {config.device}: list GPUs only (cuda:0,cuda:1) or cpu, not a mix")
    config.device = ",".join(dict.fromkeys(str(d) for d in devs))
    run = RunStore(runs_dir).create(str(problem), prob.source, {})
    h = run.put_kernel(seed_src) if seed_src is not None else None
    seed_path = str(seed_kernel) if seed_kernel is not None and _is_path(seed_kernel) else None
    run.update(config={"seed_kernel": h, "seed_path": seed_path, "context": config.as_dict()})
    return RunHandle(run, config, models, fresh=True)


def resume_run(run_id: str, *, runs_dir: str | Path = "runs",
               models: dict[str, BaseChatModel] | None = None) -> RunHandle:
    """The handle of an existing run, to continue it from its last checkpoint with its saved config."""
    try:
        run = RunStore(runs_dir).open(run_id)
        config = RunConfig.from_dict(run.info().config.context)
    except (RunError, ValueError) as e:  # ValueError: a run.json this version cannot read
        raise UsageError(str(e).splitlines()[0]) from None
    check_config(config, models)
    return RunHandle(run, config, models, fresh=False)


@dataclass
class BestKernel:
    hash: str
    path: Path
    source: str
    result: EvalResult | None


class RunView:
    """A run read from its directory (finished or in progress elsewhere); nothing is driven or changed."""

    def __init__(self, run: Run) -> None:
        self.run = run

    @property
    def id(self) -> str:
        return self.run.id

    def info(self) -> RunInfo:
        return self.run.info()

    def steps(self) -> list[StepRecord]:
        return [StepRecord.model_validate(r) for r in self.run.trace()]

    def archive(self) -> Archive | None:
        """The archive as it stood after the last generation recorded (None before the seed was judged)."""
        versions = sorted(int(p.stem) for p in (self.run.path / "archive").glob("*.json") if p.stem.isdigit()) \
            if (self.run.path / "archive").is_dir() else []
        return Archive.model_validate(self.run.archive(versions[-1])) if versions else None

    def best(self) -> BestKernel | None:
        h = self.info().best_kernel
        if not h:
            return None
        data = self.run.eval(h)
        return BestKernel(hash=h, path=self.run.kernel_path(h), source=self.run.kernel(h),
                          result=EvalResult.model_validate(data) if data is not None else None)


def open_run(run_id: str, runs_dir: str | Path = "runs") -> RunView:
    try:
        return RunView(RunStore(runs_dir).open(run_id))
    except RunError as e:
        raise UsageError(str(e)) from None


def list_runs(runs_dir: str | Path = "runs") -> list[RunInfo]:
    return RunStore(runs_dir).list()
