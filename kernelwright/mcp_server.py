"""`kernelwright mcp`: an MCP server (the official `mcp` SDK) through which a chat client drives runs.

Every tool returns within a few seconds: runs and evaluations are jobs on threads inside the server. A
chat client's own model can drive a run with `review: "proposals"` and play the strategist and the coder
through `review(..., decision="respond")`, so no API key is needed inside kernelwright. Reviews, steering
and stop requests go through the run's review desk (files in its run directory), so a run the server
drives can also be reviewed from `kernelwright chat --attach`, and the other way round.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
import traceback
import typing
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from kernelwright import api
from kernelwright.agents.context import (CHOICES, PRECISIONS, RANGES, RunConfig, default, help_for, settings_problem,
                                        spoken, user_settings)
from kernelwright.api import UsageError
from kernelwright.tools.review_desk import who

log = logging.getLogger(__name__)

INSTRUCTIONS = """kernelwright makes a GPU kernel faster with an evolutionary loop (analyst -> strategist ->
coder -> verifier -> archive) judged by a verifier nothing can fool. Start a run with start_run (review:
"proposals" pauses each branch after its strategist); poll run_status and pending_review; answer with
review (approve, edit, reject with a message, or respond with your own proposal or child kernel); steer
with steer; read get_trace and best_kernel; stop with stop_run. evaluate judges one candidate as a job:
poll job_result."""


# What a chat client's model reads about each parameter (the tools' input schemas carry these words and the
# allowed values, so a model need not guess what a bare string takes or what null picks).
RunIdArg = Annotated[str, Field(description="the run's id, as start_run or list_runs gives it")]
DEVICE_WORDS = ("cpu, cuda, cuda:N or cuda:0,cuda:1 (a run's branches spread over the GPUs); null: cuda when the "
                "server's machine has a GPU, else cpu. On the CPU kernels are verified but not timed.")
DeviceArg = Annotated[str | None, Field(description=DEVICE_WORDS)]
DecisionArg = Annotated[Literal["approve", "edit", "reject", "respond"], Field(
    description="approve: go on with the proposal; edit: change it (proposal: the changed fields); reject: drop it "
                "(message: why); respond: your own proposal, or `kernel`, the child kernel's full source")]
SteerKindArg = Annotated[Literal["note", "pin", "ban", "unpin", "unban", "clear"], Field(
    description="note: a standing instruction to a model strategist (text); pin: every branch starts from this "
                "kernel (text: its hash); ban: no proposal of this kind (text: one of tiling, warps, pipelining, "
                "grouping, reduction, fusion, online, persistent, memory_access, decomposition, algorithm, "
                "precision, other); unpin; unban (text: the kind); clear: drop the notes")]
TrialsArg = Annotated[int, Field(
    ge=RANGES["trials"][0], le=RANGES["trials"][1],
    description="verifier trials per input family; the result counts the trials of all families "
                "together (trials × families)")]
ProblemArg = Annotated[str, Field(description="a problem file's path (KernelBench format: Model, get_inputs, "
                                              "get_init_inputs), as the server's process sees it")]


PARAMETER_SPELLING = {"time_budget_s": "time_budget", "provider_retry_window_s": "provider_retry_window",
                      "cost_budget_usd": "cost_budget"}
"""the run settings whose start_run parameter is not their RunConfig name (a duration in words, not seconds)"""

DURATIONS = ("time_budget_s", "provider_retry_window_s")
"""the settings start_run takes as a duration in words (90s, 30m, 8h), as `kernelwright optimize` does"""

NOT_GIVEN = ("device", "cluster", "actors", "prices", "role_models", "knowledge")
"""the settings whose parameter is null by default: settled when the run is created (the devices, the actors), or
empty (no prices, no per-role models, the user's default knowledge store)"""

OWN_WORDS: dict[str, str] = {
    "device": DEVICE_WORDS,
    "review": "proposals: each branch pauses after its strategist until `review` decides (poll pending_review); "
              "none: the run goes on unattended",
    "model": "builtin (no model: a fixed policy that improves the seed kernel's knobs) or provider:model, "
             "e.g. openai:gpt-4.1",
    "iterations": "candidate children to evaluate in all; a proposal rejected in review is a step in the trace "
                  "but evaluates no child, so it does not count. null: 8, or no step limit when time_budget is "
                  "given (the run goes on until that budget, a plateau, the target or a stop)",
    "time_budget_s": "wall-time budget, e.g. 90s, 30m or 8h; without iterations there is no step limit",
    "cluster": "evaluate on a running Ray cluster: ray, ray://HOST:PORT or HOST:PORT; null: here",
    "actors": "with cluster: evaluation actors; null: one per GPU of the cluster",
    "provider_retry_window_s": "how long a model call retries a provider's transient failures (connection, 429, "
                               "5xx, timeouts), e.g. 30m; null: 15m; past it the run stops as failed, resumable "
                               "with resume_run",
    "prices": "model spec -> [USD per million input tokens, per million output tokens], e.g. "
              "{\"openai:gpt-4.1\": [2, 8]}; needed with cost_budget",
    "role_models": "per-role models overriding model: {\"analyst\" | \"strategist\" | \"coder\": provider:model}",
}
"""the settings whose start_run parameter carries words of this server's own (what a model client needs to know that a
CLI user does not: what null picks, how a JSON value is written); the others carry the setting's help
(`context.help_for`). Bounds and allowed values come from `context.RANGES` and `context.CHOICES` either way: a value
outside them is refused by `settings_problem`, with the sentence the CLI and the served graph say."""


def parameter(name: str) -> str:
    """A run setting as the tools' parameters name it, where an error names the setting (`context.Said`)."""
    return PARAMETER_SPELLING.get(name, name)


_SETTING_OF = {parameter(name): name for name in user_settings()}


def setting_parameters() -> list[inspect.Parameter]:
    """start_run's parameters for the run settings, made from RunConfig: one for every setting a user sets
    (`context.user_settings`), with its type, its allowed values or bounds, its default at this door
    (`context.default(name, "mcp")`) and its help (or this server's own words, `OWN_WORDS`)."""
    hints = typing.get_type_hints(RunConfig)
    out = []
    for name in user_settings():
        kind: Any = hints[name]
        value = default(name, "mcp")
        extra: dict[str, Any] = {}
        if name in DURATIONS:
            kind, value = str | None, None
        elif name in CHOICES:
            kind = Literal[tuple(sorted(CHOICES[name], key=lambda word: word != value))]  # the default first
        elif name == "precision":
            kind = Literal[PRECISIONS] | None
        if name in RANGES:
            low, high = RANGES[name]
            extra = {"minimum": low, **({"maximum": high} if high is not None else {})}
        if name in NOT_GIVEN:
            value = None
            if type(None) not in typing.get_args(kind):
                kind = kind | None
        words = OWN_WORDS.get(name) or help_for(name, parameter)
        out.append(inspect.Parameter(parameter(name), inspect.Parameter.KEYWORD_ONLY, default=value,
                                     annotation=Annotated[kind, Field(description=words,
                                                                      json_schema_extra=extra or None)]))
    return out


def settings_config(given: dict[str, Any]) -> RunConfig:
    """The RunConfig that start_run's setting parameters make: a parameter null or left out takes the setting's
    default at this door; durations are read as `kernelwright optimize --time-budget` reads them. UsageError, one
    sentence in the parameters' names, for a bad one (`context.settings_problem`, the sentence every door says)."""
    fields: dict[str, Any] = {name: default(name, "mcp") for name in user_settings()}
    fields["device"] = ""  # null: cuda where the server has a GPU, settled when the run is created
    for key, value in given.items():
        name = _SETTING_OF.get(key)
        if name is None:
            raise UsageError(f"{key!r} is not a setting of start_run")
        if value is None:
            continue
        fields[name] = _seconds(value, key) if name in DURATIONS else value
    if fields["provider_retry_window_s"] is None:
        del fields["provider_retry_window_s"]
    config = api.RunConfig(**fields)
    why = settings_problem(config)  # said before any work, as the CLI and the served graph say it
    if why:
        raise UsageError(why)
    return config


def _problem_inputs(source: str, path: str) -> list[str] | None:
    """The problem's inputs as `dtype[shape]`, computed on the meta device (nothing is allocated), so a
    reviewer sees the sizes a proposal is for; None when get_inputs cannot run that way."""
    import torch

    from kernelwright.evaluators import problem_from_source

    try:
        module = problem_from_source(source, path).module
        with torch.device("meta"):
            inputs = module.get_inputs()
    except Exception:  # noqa: BLE001 - a problem that cannot be run on the meta device (e.g. it calls .cuda())
        return None
    return [f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}" if isinstance(x, torch.Tensor) else repr(x)[:80]
            for x in inputs]


def _seconds(duration: str | float, name: str = "time_budget") -> float:
    """A duration as `kernelwright optimize --time-budget` takes it (90s, 30m, 8h; a number: seconds), in seconds."""
    from kernelwright.optimize_command import parse_duration

    return float(duration) if isinstance(duration, (int, float)) else parse_duration(duration, name)


@dataclass
class Job:
    id: str
    kind: str
    thread: threading.Thread | None = None
    status: str = "running"
    result: Any = None
    error: str | None = None
    started: float = field(default_factory=time.time)
    handle: api.RunHandle | None = None
    trials: int | None = None
    """an evaluation's trials per input family, to say what the result's trial count means"""


class Server:
    """The jobs of one server process, and the tools over them."""

    def __init__(self, runs_dir: str | Path = "runs") -> None:
        self.runs_dir = Path(runs_dir)
        self.jobs: dict[str, Job] = {}
        self.runs: dict[str, Job] = {}
        self.lock = threading.Lock()
        self.by = who("mcp")
        self._shapes: dict[str, list[str] | None] = {}

    # -- runs ---------------------------------------------------------------------------------------------

    def _drive(self, job: Job) -> None:
        assert job.handle is not None
        try:
            with job.handle:
                info = job.handle.run_to_end("mcp")
            job.status, job.result = "finished", info.model_dump(mode="json")
        except Exception as e:  # noqa: BLE001 - a run's crash is reported through run_status, not lost
            log.error("run %s failed:\n%s", job.id, traceback.format_exc())
            job.status, job.error = "failed", f"{type(e).__name__}: {e}"

    def _launch(self, handle: api.RunHandle) -> dict[str, Any]:
        job = Job(id=handle.id, kind="run", handle=handle)
        job.thread = threading.Thread(target=self._drive, args=(job,), name=f"run-{handle.id}", daemon=True)
        with self.lock:
            self.runs[handle.id] = job
        job.thread.start()
        return {"run_id": handle.id, "run_dir": str(handle.path)}

    def start_run(self, problem: str, seed_kernel: str | None = None, **settings: Any) -> dict[str, Any]:
        """A run of `problem` from `seed_kernel` with the settings given by their parameters' names
        (`setting_parameters`); the others take their defaults at this door."""
        config = settings_config(settings)
        return self._launch(api.start_run(problem, seed_kernel=seed_kernel, config=config, runs_dir=self.runs_dir))

    def resume_run(self, run_id: str, device: str | None = None, cluster: str | None = None,
                   actors: int | None = None) -> dict[str, Any]:
        with self.lock:
            live = self.runs.get(run_id)
        if live is not None and live.status == "running":
            raise UsageError(f"run {run_id} is already running in this server")
        if api.driven_elsewhere(run_id, runs_dir=self.runs_dir):
            raise UsageError(f"run {run_id} is driven by another live process; review it instead")
        return self._launch(api.resume_run(run_id, runs_dir=self.runs_dir, device=device, cluster=cluster,
                                           actors=actors))

    def run_status(self, run_id: str) -> dict[str, Any]:
        info = api.open_run(run_id, self.runs_dir).info()
        job = self.runs.get(run_id)
        waiting = api.pending_reviews(run_id, runs_dir=self.runs_dir)
        return {"run_id": run_id, "status": info.status, "stop_reason": info.stop_reason,
                "resumable": info.resumable, "steps": info.steps,
                "best_kernel": info.best_kernel, "best_speedup_vs_eager": info.best_speedup,
                "pending_reviews": [p.step_id for p in waiting],
                "driven_here": bool(job and job.status == "running"),
                "error": job.error if job else None, "budget": self._budget_words(run_id, info)}

    def _budget_words(self, run_id: str, info: Any) -> str:
        """steps and the iteration budget count different things: say how, beside `steps`."""
        cfg = api.RunConfig.from_dict(info.config.settings)
        steps = api.open_run(run_id, self.runs_dir).steps()
        rejected = sum(1 for r in steps if r.review is not None and r.review.decision == "reject")
        limit = cfg.step_budget()
        budget = (f"the iteration budget ({limit})" if limit is not None else
                  f"an iteration budget (none: no step limit, {cfg.budget_words()})")
        return (f"{info.steps} steps, {rejected} of them rejected in review; {budget} counts evaluated children "
                "only, so a rejected proposal is a step in the trace that does not count")

    def pending_review(self, run_id: str) -> dict[str, Any]:
        waiting = api.pending_reviews(run_id, runs_dir=self.runs_dir)
        view = api.open_run(run_id, self.runs_dir)
        if not waiting:
            info = view.info()
            return {"step_id": None, "note": f"no step of run {run_id} waits for a review now (status {info.status}, "
                                             f"{info.steps} steps); poll again, or read run_status"}
        p = waiting[0]
        out = p.model_dump()
        out["parent_source"] = view.run.kernel(p.parent) if p.parent else None
        out["also_waiting"] = [q.step_id for q in waiting[1:]]
        out["problem"] = view.info().problem
        out["problem_inputs"] = self._inputs(run_id, view)
        return out

    def _inputs(self, run_id: str, view: Any) -> list[str] | None:
        with self.lock:
            if run_id in self._shapes:
                return self._shapes[run_id]
        shapes = _problem_inputs(view.run.problem_source(), view.info().problem)
        with self.lock:
            self._shapes[run_id] = shapes
        return shapes

    def _strategist(self, run_id: str) -> str:
        info = api.open_run(run_id, self.runs_dir).info()
        return api.RunConfig.from_dict(info.config.settings).model_for("strategist")

    def review(self, run_id: str, decision: str, proposal: dict[str, Any] | str | None = None,
               kernel: str | None = None, message: str | None = None, step_id: str | None = None) -> dict[str, Any]:
        p = api.review(run_id, decision, proposal=proposal, kernel=kernel, message=message, step_id=step_id,
                       by=self.by, runs_dir=self.runs_dir)
        out: dict[str, Any] = {"run_id": run_id, "step_id": p.step_id, "decision": decision, "recorded": True}
        if decision == "reject" and message and self._strategist(run_id) == "builtin":
            out["note"] = ("the reason is recorded in the trace, but the builtin strategist cannot read it: it does "
                           "not change its next proposal for it; ban the kind of move (steer kind=ban) or respond "
                           "with your own proposal")
        return out

    def steer(self, run_id: str, text: str = "", kind: str = "note") -> dict[str, Any]:
        status = api.open_run(run_id, self.runs_dir).info().status
        if kind == "pin" and status == "finished":
            raise UsageError(f"run {run_id} is finished: a pin would steer no step (start a new run from that "
                             "kernel, or pin on a run that goes on)")
        e = api.steer(run_id, kind, text, by=self.by, runs_dir=self.runs_dir)
        out = {"run_id": run_id, **e.model_dump(), "in_force": api.steering(run_id, self.runs_dir).model_dump()}
        notes = []
        if status in ("finished", "failed"):
            notes.append(f"run {run_id} is {status}: this steers it only if it is resumed")
        if kind == "note" and self._strategist(run_id) == "builtin":
            notes.append("the builtin strategist cannot read notes: it is recorded, but only a model strategist "
                         "follows it; ban or pin steer the builtin one")
        if notes:
            out["note"] = "; ".join(notes)
        return out

    def stop_run(self, run_id: str, wait_s: float = 5.0) -> dict[str, Any]:
        api.request_stop(run_id, by=self.by, runs_dir=self.runs_dir)
        job = self.runs.get(run_id)
        if job is not None and job.thread is not None:
            job.handle.request_stop() if job.handle else None
            job.thread.join(timeout=wait_s)
        info = api.open_run(run_id, self.runs_dir).info()
        ended = job is None or job.thread is None or not job.thread.is_alive()
        return {"run_id": run_id, "stopped": ended, "status": info.status, "stop_reason": info.stop_reason,
                "note": None if ended else "the step in flight finishes first; poll run_status"}

    def list_runs(self) -> list[dict[str, Any]] | str:
        """The runs, or one sentence when there are none (an empty list reaches a client as no text at all)."""
        runs = [{"run_id": i.id, "problem": i.problem, "status": i.status, "steps": i.steps,
                 "best_speedup_vs_eager": i.best_speedup, "created": i.created} for i in api.list_runs(self.runs_dir)]
        return runs or f"no runs in {self.runs_dir} yet: start one with start_run"

    def get_trace(self, run_id: str, since: int = 0) -> list[dict[str, Any]] | str:
        steps = api.open_run(run_id, self.runs_dir).steps()
        if not steps[since:]:
            return (f"run {run_id} has no steps yet" if not steps else
                    f"run {run_id} has {len(steps)} steps: none from step {since} on (since counts from 0)")
        return [s.model_dump(mode="json") for s in steps[since:]]

    def best_kernel(self, run_id: str) -> dict[str, Any]:
        view = api.open_run(run_id, self.runs_dir)
        b = view.best()
        if b is None:
            return {"hash": None, "note": f"run {run_id} has no judged kernel yet: the seed is judged first"}
        t = b.result.timing if b.result else None
        out: dict[str, Any] = {"hash": b.hash, "path": str(b.path), "source": b.source,
                               "verdict": b.result.verdict if b.result else None,
                               "median_ms": t.median_ms if t else None,
                               "speedup_vs_eager": t.speedup_vs_eager if t else None,
                               "speedup_vs_compile": t.speedup_vs_compile if t else None}
        archive = view.archive()
        unmeasured = [h for h in (archive.unmeasured if archive is not None else []) if h != b.hash]
        if t is None and unmeasured:
            out["verified_untimed"] = unmeasured
            out["note"] = (f"nothing was timed (kernels are not timed on the CPU), so nothing is ranked: this is "
                           f"the starting kernel; {len(unmeasured)} verified children are in verified_untimed "
                           "(hashes, newest last); a GPU run can measure them")
        return out

    # -- evaluations as jobs ------------------------------------------------------------------------------

    def evaluate(self, problem: str, candidate: str, device: str | None = None,
                 trials: int = default("trials")) -> dict[str, Any]:
        job = Job(id="eval-" + uuid.uuid4().hex[:8], kind="evaluate", trials=trials)

        def work() -> None:
            try:
                r = api.evaluate(problem, candidate, device=device, trials=trials)
                job.status, job.result = "finished", r.model_dump(mode="json")
            except UsageError as e:
                job.status, job.error = "failed", str(e)
            except Exception as e:  # noqa: BLE001
                log.error("evaluation %s failed:\n%s", job.id, traceback.format_exc())
                job.status, job.error = "failed", f"{type(e).__name__}: {e}"

        job.thread = threading.Thread(target=work, name=job.id, daemon=True)
        with self.lock:
            self.jobs[job.id] = job
        job.thread.start()
        return {"job_id": job.id}

    def job_result(self, job_id: str) -> dict[str, Any]:
        job = self.jobs.get(job_id)
        if job is None:
            raise UsageError(f"no job {job_id} in this server")
        out = {"job_id": job_id, "status": job.status, "result": job.result, "error": job.error,
               "elapsed_s": round(time.time() - job.started, 1)}
        if job.trials is not None:  # `trials` is per input family; the result's checks count them all together
            families = (job.result or {}).get("families") or []
            out["trials"] = (f"{job.trials} trial{'' if job.trials == 1 else 's'} per input family" + (
                f" × {len(families)} families ({', '.join(families)}) = {job.trials * len(families)} in all, the "
                "count the checks give" if families else "; the checks count the trials of all the families together"))
        return out

    def close(self) -> None:
        for job in list(self.runs.values()):
            if job.handle is not None and job.thread is not None and job.thread.is_alive():
                job.handle.request_stop()


def build(runs_dir: str | Path = "runs") -> Any:
    """The MCPServer with kernelwright's tools (each raises a ToolError with one sentence on bad input)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    s = Server(runs_dir)
    app = MCPServer("kernelwright", instructions=INSTRUCTIONS)
    app.kernelwright = s  # type: ignore[attr-defined]

    def tool(fn: Any, settings: bool = False) -> Any:
        """`fn`'s name, words and parameters as an MCP tool calling the Server's method of that name; with
        `settings`, the run settings' parameters too (`setting_parameters`)."""
        method = getattr(s, fn.__name__)

        def call(**kw: Any) -> Any:
            try:
                return method(**kw)
            except UsageError as e:
                raise ToolError(spoken(e, parameter)) from None

        call.__name__, call.__doc__ = fn.__name__, fn.__doc__
        # evaluated here: the parameters' Annotated descriptions and Literal values are module-level names
        # that the SDK, resolving strings elsewhere, would not find
        sig = inspect.signature(fn, eval_str=True)
        if settings:
            sig = sig.replace(parameters=[*sig.parameters.values(), *setting_parameters()])
        call.__signature__ = sig  # type: ignore[attr-defined]
        call.__annotations__ = {**{n: p.annotation for n, p in sig.parameters.items()},
                                "return": sig.return_annotation}
        app.tool()(call)
        return fn

    def start_run(problem: ProblemArg,
                  seed_kernel: Annotated[str | None, Field(description="the kernel to start from: a file path or its "
                                                                       "source (ModelNew with Triton kernels); "
                                                                       "needed with model builtin")] = None,
                  ) -> dict[str, Any]:
        """Start an optimization run of a problem file (a KernelBench-style Model with get_inputs) from a seed
        kernel file; returns {"run_id"} at once while the run goes on in the server. review "proposals" pauses
        each branch after its strategist until `review` decides; "none" runs unattended. model: builtin (no
        model) or provider:model. device: cpu, cuda, cuda:N or cuda:0,cuda:1 (branches spread over the GPUs).
        iterations counts evaluated children: a proposal rejected in review adds a step but does not count;
        null: 8, or no step limit when time_budget (e.g. 8h) is given, as for `kernelwright optimize`.
        cluster: evaluate on a running Ray cluster (ray, ray://HOST:PORT or HOST:PORT), with `actors` evaluation
        actors (default one per GPU) and device cuda or cpu for their kind. Every other setting of a run
        (budgets, prices, per-role models, profiling, the compiled baseline's mode, ...) is a parameter too."""

    tool(start_run, settings=True)

    @tool
    def resume_run(run_id: RunIdArg,
                   device: Annotated[str | None, Field(description="move the run to these devices of this server "
                                                                   "(cpu, cuda, cuda:N, cuda:0,cuda:1); null: where "
                                                                   "it ran")] = None,
                   cluster: Annotated[str | None, Field(description="move the run to this Ray cluster (ray, "
                                                                    "ray://HOST:PORT or HOST:PORT)")] = None,
                   actors: Annotated[int | None, Field(description="with cluster: evaluation actors")] = None
                   ) -> dict[str, Any]:
        """Continue a stopped or interrupted run (or one whose driver died) from its last checkpoint, where it
        evaluated before; device alone moves it to this server's devices, cluster (with actors) to a Ray
        cluster."""

    @tool
    def run_status(run_id: RunIdArg) -> dict[str, Any]:
        """Status, steps so far, best kernel and speedup, and which steps wait for a review; `budget` says
        what the iteration budget counts (evaluated children, not rejected proposals)."""

    @tool
    def pending_review(run_id: RunIdArg) -> dict[str, Any]:
        """The oldest step waiting for a review (step_id, diagnosis, proposal, allowed_decisions, the parent's
        source, the problem's inputs as dtype[shape]), or step_id null and a note when none waits."""

    @tool
    def review(run_id: RunIdArg, decision: DecisionArg,
               proposal: Annotated[dict[str, Any] | str | None, Field(
                   description="edit: the changed fields, e.g. {\"what\": ...}; respond: your own proposal (fields "
                               "or the change in words)")] = None,
               kernel: Annotated[str | None, Field(description="respond: the child kernel's full source, verified "
                                                               "as the step's child")] = None,
               message: Annotated[str | None, Field(description="reject: why (recorded; a model strategist is "
                                                                "told, the builtin one cannot read it)")] = None,
               step_id: Annotated[str | None, Field(description="the step to decide; null: the oldest waiting "
                                                                "one")] = None) -> dict[str, Any]:
        """Decide a waiting step: approve; edit (proposal: the changed fields, e.g. {"what": ...}); reject
        (message: why; a model strategist is told, the builtin one cannot read it); respond (your own proposal,
        or kernel: the child kernel's full source, which is verified as the step's child). step_id defaults to
        the oldest waiting step."""

    @tool
    def steer(run_id: RunIdArg,
              text: Annotated[str, Field(description="note: the instruction; pin: the kernel's hash (or a unique "
                                                     "prefix); ban, unban: the kind of move")] = "",
              kind: SteerKindArg = "note") -> dict[str, Any]:
        """Steer the run from the next step on. kind note: a standing instruction to a model strategist (text;
        the builtin one cannot read notes); pin: every branch starts from this kernel (text: its hash; refused
        on a finished run); ban: no proposal of this category (text: tiling, warps, pipelining, ...); unpin,
        unban, clear (drop the notes)."""

    @tool
    def stop_run(run_id: RunIdArg) -> dict[str, Any]:
        """Stop the run after the step in flight (checkpointed; resume_run continues it)."""

    @tool
    def list_runs() -> list[dict[str, Any]] | str:
        """Every run in the server's run directory, newest last (a sentence when there is none)."""

    @tool
    def get_trace(run_id: RunIdArg,
                  since: Annotated[int, Field(ge=0, description="skip the first `since` step records (0: all)")] = 0
                  ) -> list[dict[str, Any]] | str:
        """The run's step records (from step `since`; a sentence when there is none): diagnosis, proposal,
        review, diff, verdict, timing and the archive's decision (schema: docs/trace.md)."""

    @tool
    def best_kernel(run_id: RunIdArg) -> dict[str, Any]:
        """The run's best kernel: hash, path, source and measured numbers (hash null and a note before the seed
        is judged). Where nothing could be timed (the CPU), it is the starting kernel and verified_untimed
        names the verified children."""

    @tool
    def evaluate(problem: ProblemArg,
                 candidate: Annotated[str, Field(description="the candidate: a file path or its source (ModelNew "
                                                             "with Triton kernels)")],
                 device: DeviceArg = None, trials: TrialsArg = default("trials")) -> dict[str, Any]:
        """Judge one candidate (a file path or its source) against a problem file, as a job: returns
        {"job_id"}; poll job_result."""

    @tool
    def job_result(job_id: Annotated[str, Field(description="the job_id evaluate returned")]) -> dict[str, Any]:
        """A job's status and, once finished, its result (an evaluation's verdict, timing and checks)."""

    return app


def serve(transport: str = "stdio", runs_dir: str | Path = "runs", host: str = "127.0.0.1", port: int = 8765) -> None:
    app = build(runs_dir)
    try:
        if transport == "stdio":
            app.run("stdio")
        else:
            app.run("streamable-http", host=host, port=port)
    finally:
        app.kernelwright.close()
