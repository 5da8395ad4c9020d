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

import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel

from kernelwright.agents.archive import Archive
from kernelwright.agents.context import (RunConfig, RunContext, RunSetupError, Said, SettingsSentence, create_run,
                                        kernel_source, settings_problem, settle_devices)
from kernelwright.agents.llm import ProviderError
from kernelwright.agents.records import StepRecord
from kernelwright.agents.roles import STOPPED_ON_REQUEST
from kernelwright.evaluators import (DeviceError, EvalPolicy, EvalResult, Evaluator, ProblemError, load_problem,
                                     resolve_device)
from kernelwright.evaluators.sandbox import allowed_by_environment, refusal_here
from kernelwright.tools.review_desk import Decision, PendingReview, ReviewDesk, ReviewError, Steering, SteerEntry, who
from kernelwright.tools.runstore import Progress, Run, RunError, RunInfo, RunStore

if TYPE_CHECKING:
    from kernelwright.evaluators.cluster import Slot
    from kernelwright.graphs.tracing import RunTracing

POLL_S = 0.2
"""how often a run waiting for a review looks for decisions"""

__all__ = ["Archive", "BestKernel", "Progress", "RunConfig", "RunHandle", "RunInfo", "RunView", "StepRecord", "UsageError",
           "check_confinement", "evaluate", "open_run", "resume_run", "start_run"]


class UsageError(SettingsSentence):
    """Bad input from the caller (a setting, a file, a config); the message is one sentence, which names a setting
    by its own name (`str()`) and by a front door's spelling of it (`spoken`: the CLI's --flags)."""


class Unconfined(UsageError):
    """Candidate code would run here without the OS sandbox and the user has not opted out (one sentence)."""


def check_confinement(allow_unconfined: bool | None = None) -> None:
    """Refuse, before anything starts, to run candidate code on this machine when the OS sandbox cannot
    confine it and the user has not opted out by name (`allow_unconfined`; None: KERNELWRIGHT_ALLOW_UNCONFINED).

    Every front door that runs candidates here calls it (the CLI's eval, profile, optimize, chat and bench,
    `evaluate`, `start_run`, `resume_run` and so the MCP server's tools); evaluations on a Ray cluster are
    decided by the workers there, whose verdict is `unconfined`. Raises Unconfined with the sentence."""
    why = refusal_here(allow_unconfined)
    if why:
        raise Unconfined(why)


# -- evaluation -------------------------------------------------------------------------------------------


def evaluate(problem: str | Path, candidate: str | Path, *, device: str | None = None, precision: str | None = None,
             trials: int = 5, compile_mode: str | None = "default", slot: Slot | None = None,
             allow_unconfined: bool | None = None) -> EvalResult:
    """Judge one candidate (a file path, or its source text) against a problem file, here or on a Ray cluster's
    `slot`. Never raises for a bad candidate: the verdict says why. Raises UsageError for a bad problem file or
    an unusable device, and Unconfined where the OS sandbox cannot confine the candidate here and
    `allow_unconfined` (None: KERNELWRIGHT_ALLOW_UNCONFINED) does not opt out."""
    allow = allowed_by_environment() if allow_unconfined is None else allow_unconfined
    if slot is None:
        check_confinement(allow)
    source = _source(candidate, "candidate")
    try:
        prob = load_problem(Path(problem), precision)
        dev = resolve_device(device) if slot is None else None
    except (ProblemError, DeviceError) as e:
        raise UsageError(str(e)) from None
    policy = EvalPolicy(trials=trials, compile_mode=compile_mode, allow_unconfined=allow)
    if slot is not None:
        return slot.evaluator(prob, policy).evaluate(source)
    with Evaluator(prob, str(dev), policy) as ev:
        return ev.evaluate(source)


def _source(given: str | Path, what: str) -> str:
    """A candidate or seed given as a path or as its source, as its source (`context.kernel_source`'s rule)."""
    try:
        return kernel_source(given, what)[0]
    except RunSetupError as e:
        raise UsageError(e.said) from None


# -- checking a run's configuration -----------------------------------------------------------------------


def check_config(config: RunConfig, models: dict[str, BaseChatModel] | None = None, *,
                 build_models: bool = True) -> None:
    """Every setting must be usable (`context.settings_problem`: allowed values, bounds, well-formed models, budgets
    that make sense) and, with `build_models`, every model named constructible (provider package installed, key
    present). UsageError with one sentence otherwise."""
    why = settings_problem(config)
    if why:
        raise UsageError(why)
    specs = sorted({s for s in [config.model, *config.role_models.values()] if s != "builtin"})
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

        from kernelwright.graphs.checkpoints import Pruner
        from kernelwright.graphs.optimize import builder

        self.run = run
        self.config = config
        self.context = RunContext.open(config, run, models)
        self._conn = sqlite3.connect(str(run.checkpoint_path), check_same_thread=False)
        saver = SqliteSaver(self._conn)
        self._graph = builder().compile(checkpointer=saver)
        self.pruner = Pruner(saver, run.id)
        """keeps the run's checkpoint history bounded: the last generations, not every step of the night"""
        self._thread = {"configurable": {"thread_id": run.id}, "recursion_limit": 10_000}
        self._fresh = fresh
        self._closed = False
        self._resumed: set[str] = set()
        self._tracing: RunTracing | None = None
        """the run's LangSmith tracing, once `steps()` finds it on (None: off)"""
        self._generation: tuple[int, int, int] | None = None
        """the generation at work: (number, branches, branches done), for the run's phase (`_mark`)"""

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

    def steps(self, driver: str = "python") -> Iterator[StepRecord]:
        """Drive the run until it stops, yielding each step record once it is in the trace.

        With `review: proposals`, each branch pauses after its strategist: the pending reviews are posted on
        the run's review desk (`pending_reviews`), and the run waits for decisions (`review`, from this
        process or any other) and goes on with each as it comes. A stop requested while it waits leaves the
        reviews pending, checkpointed, for whoever resumes the run. `driver` names who drives (optimize,
        chat, mcp) for the desk."""
        from kernelwright.graphs import tracing

        desk = ReviewDesk(self.run)
        desk.claim(driver)
        desk.clear_stop()
        if self._tracing is None and tracing.enabled():
            self._tracing = tracing.RunTracing(self.run.id, self.run.info().problem, self.config)
        self.run.set_phase("starting the run" if self._fresh else "resuming from the last checkpoint")
        try:
            yield from self._drive(desk)
        finally:
            self.run.end_progress()
            desk.release()
            if self._tracing is not None:  # a short run must not end before LangSmith has its traces
                self._tracing.flush()

    def _drive(self, desk: ReviewDesk) -> Iterator[StepRecord]:
        from langgraph.types import Command

        from kernelwright.graphs.optimize import initial_state

        state: Any = None
        saved = self._graph.get_state(self._thread)
        if saved.interrupts and not self._fresh:
            state = self._wait_for_reviews(desk, saved.interrupts)  # a resumed run that was waiting
            if state is None:
                return
        elif self._fresh or not saved.values:
            state = initial_state()  # a new run, or one killed before its first checkpoint: start it over
        elif saved.values.get("stop") and not saved.next and (self.run.info().resumable
                                                                or saved.values["stop"] == STOPPED_ON_REQUEST):
            # stopped on request, or by a provider that stayed down: take the stop back, so the graph goes on
            # from the generation it finished (or, when the seed was never judged, from the start)
            if (saved.values.get("archive") or {}).get("version") is None:
                state = initial_state()
            else:
                self._graph.update_state(self._thread, {"stop": None}, as_node="archive")
            self.run.update(status="running", stop_reason=None, resumable=False)
        self._fresh = False
        seen = len(self.run.trace())
        while True:
            moved = False
            for update in self._stream(state):
                moved = True
                self._mark(update)
                records = self.run.trace()
                for r in records[seen:]:
                    yield StepRecord.model_validate(r)
                seen = len(records)
            if isinstance(state, Command):  # the decisions it carried are consumed
                desk.clear(sorted(self._resumed))
            snapshot = self._graph.get_state(self._thread)
            if not snapshot.interrupts:
                if self._tracing is not None and snapshot.next and moved:
                    state = None  # a traced run stops after each generation (its own trace): go on with the next
                    continue
                desk.post([])
                return
            state = self._wait_for_reviews(desk, snapshot.interrupts)
            if state is None:
                return

    def _stream(self, state: Any) -> Iterator[Any]:
        """The graph's updates from `state` on, to the end of the run or a pause for review. With LangSmith
        tracing on, to the end of the generation at most, under a root run of its own (`graphs.tracing`)."""
        if self._tracing is None:
            yield from self._graph.stream(state, self._thread, context=self.context, stream_mode="updates")
            return
        from kernelwright.graphs.tracing import GENERATION_END, generation_ahead

        generation, resumed, archive = generation_ahead(state, self._graph.get_state(self._thread))
        trace = self._tracing.generation(generation, archive, resumed=resumed)
        stream = self._graph.stream(state, {**self._thread, "run_name": "optimize"}, context=self.context,
                                    stream_mode="updates", interrupt_after=GENERATION_END)
        error: str | None = "stopped before the generation ended"  # the caller let go of the steps
        try:
            while True:
                with trace.active():
                    update = next(stream, _END)
                if update is _END:
                    break
                yield update
            error = None
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
            raise
        finally:
            with trace.active():
                stream.close()
            try:
                after = dict(self._graph.get_state(self._thread).values or {})
            except Exception:  # noqa: BLE001 - the handle was closed under it: end the trace with less
                after = {}
            trace.end([r for r in self.run.trace() if r.get("generation") == generation], after, error)

    def _mark(self, update: Any) -> None:
        """The run's phase after a node's update: which generation is at work and how many of its branches are
        done (`Run.progress`; the roles mark the seed's phases and their model calls themselves)."""
        if not isinstance(update, dict):
            return
        chosen = update.get("select")
        if isinstance(chosen, dict) and chosen.get("generation") is not None:
            self._generation = (int(chosen["generation"]), len(chosen.get("parents") or []), 0)
            gen, n, _ = self._generation
            self.run.set_phase(f"generation {gen}: {n} branch{'es' if n != 1 else ''} at work")
        elif "branch" in update and self._generation is not None:
            gen, n, done = self._generation
            self._generation = (gen, n, done + 1)
            self.run.set_phase(f"generation {gen}: {min(done + 1, n)} of {n} branches done")
        elif "archive" in update and self._generation is not None:
            self.run.set_phase(f"generation {self._generation[0]} archived")
        if "archive" in update:
            self.pruner.generation_ended()

    def _wait_for_reviews(self, desk: ReviewDesk, interrupts: Any) -> Any:
        """Post the paused steps, wait for at least one decision, and return the Command that resumes them
        (None when a stop was requested while waiting: the reviews stay pending, checkpointed)."""
        from langgraph.types import Command

        from kernelwright.agents import proposal_review as reviews

        pending = [reviews.pending_of(i.value, i.id) for i in interrupts
                   if isinstance(i.value, dict) and i.value.get("kind") == reviews.KIND]
        desk.post(pending)
        by_step = {p.step_id: p for p in pending}
        self.run.update(status="awaiting review",
                        stop_reason=f"{len(pending)} proposal(s) wait for a review")
        self.run.set_phase(f"waiting for a review of {len(pending)} proposal(s)")
        while True:
            ready = {s: d for s, d in desk.decisions().items() if s in by_step}
            if ready:
                self.run.update(status="running", stop_reason=None)
                self._resumed = set(ready)
                return Command(resume={by_step[s].interrupt_id: d.model_dump() for s, d in ready.items()})
            if self.context.stop_requested:
                self.run.update(status="awaiting review",
                                stop_reason=f"stopped while {len(pending)} proposal(s) wait for a review; resume: "
                                            f"kernelwright chat --attach {self.run.id}")
                return None
            time.sleep(POLL_S)

    def run_to_end(self, driver: str = "python") -> RunInfo:
        """Drive the run until it stops; its final metadata."""
        for _ in self.steps(driver):
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
            if self._tracing is not None:
                self._tracing.close()

    def __enter__(self) -> RunHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_END = object()
"""the end of a graph stream"""


def start_run(problem: str | Path, *, seed_kernel: str | Path | None = None, config: RunConfig | None = None,
              runs_dir: str | Path = "runs", models: dict[str, BaseChatModel] | None = None) -> RunHandle:
    """Create a run directory and return its handle (nothing runs until `steps()` or `run_to_end()`).

    `seed_kernel` is a file path or source text; without one, the coder's model writes the first kernels.
    `models` gives ready chat models by spec (a scripted model, a client built by the application)."""
    config = config or RunConfig()
    check_config(config, models)
    if not config.cluster:  # on a cluster, the workers there decide (verdict `unconfined`)
        check_confinement()
    if not Path(problem).is_file():  # the problem first: without it no seed matters
        raise UsageError(f"{problem}: no such problem file")
    if seed_kernel is None and config.model_for("coder") == "builtin":
        raise UsageError(Said(lambda s: f"the builtin policy improves an existing kernel: give one with "
                              f"{s('seed_kernel')}"))
    seed_src, seed_path = None, None
    if seed_kernel is not None:
        try:
            seed_src, seed_path = kernel_source(seed_kernel, "seed kernel")
        except RunSetupError as e:
            raise UsageError(e.said) from None
    try:
        run = create_run(problem, seed_src, config, runs_dir, seed_path)
    except RunSetupError as e:
        raise UsageError(e.said) from None
    return RunHandle(run, config, models, fresh=True)


def resume_run(run_id: str, *, runs_dir: str | Path = "runs", models: dict[str, BaseChatModel] | None = None,
               device: str | None = None, cluster: str | None = None, actors: int | None = None,
               hosts: str | None = None) -> RunHandle:
    """The handle of an existing run, to continue it from its last checkpoint with its saved config.

    The run may move: `cluster` (with `actors`, and `device` for the actors' kind) evaluates on that Ray
    cluster from now on; `device` alone evaluates here, on those devices, and leaves any saved cluster. The
    new place is saved in run.json. Nothing given: where the run was. `hosts` changes how local devices are
    hosted (`RunConfig.hosts`), saved the same way."""
    try:
        run = RunStore(runs_dir).open(run_id)
        saved = run.info().config
        config = RunConfig.from_dict(saved.settings)
    except (RunError, ValueError) as e:  # ValueError: a run.json this version cannot read
        raise UsageError(str(e).splitlines()[0]) from None
    check_config(config, models)
    moved = device is not None or cluster is not None or actors is not None or hosts is not None
    if hosts is not None:
        config.hosts = hosts
    if cluster:
        config.cluster, config.device, config.actors = cluster, device or "", actors or 0
    elif device is not None:  # here; actors without a cluster are refused by settle_devices
        config.cluster, config.device, config.actors = "", device, actors or 0
    elif actors is not None:
        config.actors = actors
    if moved or config.cluster:
        try:
            settle_devices(config)
        except RunSetupError as e:
            where = "" if moved else f" (it evaluated on the Ray cluster {config.cluster})"
            why = e.said
            raise UsageError(Said(lambda s: f"run {run_id}{where}: {why(s)}" + (
                "" if moved else f"; resume it elsewhere with {s('cluster')} ADDRESS, or here with {s('device')}")
                                  )) from None
    if not config.cluster:
        check_confinement()
    if moved:
        run.update(config={**saved.model_dump(), "settings": config.as_dict()})
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

    def steps(self, start: int = 0) -> list[StepRecord]:
        """The run's step records from position `start` on (see `read_steps`)."""
        return read_steps(self.run, start)

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


def read_steps(run: Run, start: int = 0) -> list[StepRecord]:
    """The run's step records from position `start` on (only those are validated: a follower of a long run
    reads the new ones). UsageError, one sentence, for a record this version cannot read."""
    try:
        return [StepRecord.model_validate(r) for r in run.trace()[start:]]
    except ValueError as e:  # pydantic
        raise UsageError(f"run {run.id}: its trace does not match the step-record schema "
                         f"({str(e).splitlines()[0]})") from None


def open_run(run_id: str, runs_dir: str | Path = "runs") -> RunView:
    try:
        return RunView(RunStore(runs_dir).open(run_id))
    except RunError as e:
        raise UsageError(str(e)) from None


def list_runs(runs_dir: str | Path = "runs") -> list[RunInfo]:
    return RunStore(runs_dir).list()


# -- reviewing and steering a run (from this process or any other) ----------------------------------------


def _desk(run_id: str, runs_dir: str | Path) -> ReviewDesk:
    try:
        return ReviewDesk(RunStore(runs_dir).open(run_id))
    except RunError as e:
        raise UsageError(str(e)) from None


def pending_reviews(run_id: str, runs_dir: str | Path = "runs") -> list[PendingReview]:
    """The run's steps paused for a review that have no decision yet, oldest first."""
    return _desk(run_id, runs_dir).waiting()


def review(run_id: str, decision: str, *, proposal: dict[str, Any] | str | None = None, kernel: str | None = None,
           message: str | None = None, step_id: str | None = None, by: str | None = None,
           runs_dir: str | Path = "runs") -> PendingReview:
    """Decide a paused step (the oldest waiting one unless `step_id` names another): approve, edit (with
    `proposal`), reject (with `message`, the reason the strategist is told) or respond (with a `proposal` of
    your own, or the child `kernel`'s source). `proposal` may be a dict of the strategist's fields or just
    the change in words. The driver, in whatever process, goes on with it. UsageError, in one sentence,
    when it cannot be taken."""
    from kernelwright.agents import proposal_review as reviews

    desk = _desk(run_id, runs_dir)
    waiting = desk.waiting()
    target = next((p for p in waiting if p.step_id == step_id), None) if step_id else (waiting[0] if waiting else None)
    if isinstance(proposal, str):
        proposal = {"what": proposal}
    try:
        if decision not in reviews.DECISIONS:
            raise ReviewError(f"decision {decision!r}: use one of {', '.join(reviews.DECISIONS)}")
        if proposal is not None:  # checked now, so the reviewer hears of a bad field, not the run
            proposal = reviews.proposal_of(proposal, target.proposal if target and decision == "edit" else None)
            if target is not None and decision in ("edit", "respond"):
                coder = RunConfig.from_dict(desk.run.info().config.settings).model_for("coder")
                proposal = reviews.for_coder(proposal, desk.run.kernel(target.parent), coder)
        if kernel is not None and not kernel.strip():
            raise ReviewError("the kernel is empty")
        d = Decision(type=decision, proposal=proposal, kernel=kernel, message=message, by=by or who("python"))
        return desk.decide(step_id, d)
    except ReviewError as e:
        raise UsageError(str(e)) from None


def steer(run_id: str, kind: str, text: str = "", *, by: str | None = None, runs_dir: str | Path = "runs") -> SteerEntry:
    """Steer a run from the next step on: note (a standing instruction to the strategist), pin (every branch
    starts from this kernel), ban (no move of this category), unpin, unban, clear (drop the notes)."""
    from typing import get_args

    from kernelwright.agents.schemas import Category

    if kind not in ("note", "pin", "ban", "unpin", "unban", "clear"):
        raise UsageError(f"steer {kind!r}: use note, pin, ban, unpin, unban or clear")
    if kind in ("ban", "unban") and text.strip() not in get_args(Category):
        raise UsageError(f"{kind} {text.strip()!r}: name a kind of move, one of {', '.join(get_args(Category))}")
    desk = _desk(run_id, runs_dir)
    if kind == "pin":
        archive = open_run(run_id, runs_dir).archive()
        try:
            h = desk.kernel(text.strip())
        except ReviewError as e:
            raise UsageError(str(e)) from None
        if archive is None or h not in archive.entries:
            raise UsageError(f"pin {text.strip()}: kernel {h[:12]} is not in the run's archive (pin a verified one)")
        text = h
    try:
        return desk.steer(kind, text, by=by or who("python"))  # type: ignore[arg-type]
    except ReviewError as e:
        raise UsageError(str(e)) from None


def steering(run_id: str, runs_dir: str | Path = "runs") -> Steering:
    """What the run's steering puts in force now."""
    return _desk(run_id, runs_dir).steering()


def driven_elsewhere(run_id: str, runs_dir: str | Path = "runs") -> bool:
    """Another live process drives the run now (so this one should review it, not drive it)."""
    return _desk(run_id, runs_dir).driven_elsewhere()


def request_stop(run_id: str, *, by: str | None = None, runs_dir: str | Path = "runs") -> None:
    """Ask whatever process drives the run to stop after the step in flight (checkpointed; resumable)."""
    _desk(run_id, runs_dir).request_stop(by or who("python"))


def chat_asker(spec: str, config: RunConfig, models: dict[str, BaseChatModel] | None = None) -> Any:
    """A function (run_id, runs_dir, text) -> answer: the chat agent on `spec`, with read tools and the chat's
    actions over the run, keeping the conversation between calls."""
    from langchain_core.messages import BaseMessage

    from kernelwright.agents import chat_agent
    from kernelwright.agents.llm import Models

    built = Models(config.base_url, config.prices, models)
    history: list[BaseMessage] = []

    def ask(run_id: str, runs_dir: str | Path, text: str) -> str:
        try:
            model = built.chat_model(spec)
        except ProviderError as e:
            return str(e)
        tools = chat_agent.RunTools(RunStore(runs_dir).open(run_id), who("chat"))
        return chat_agent.ask(model, tools, text, history)

    return ask
