"""The optimization graph as `langgraph dev` serves it (langgraph.json at the repository root), for
LangGraph Studio and Agent Chat UI.

A served graph gets only JSON: its input names the problem, the seed kernel and the run's settings. The
`start` node creates the run directory (or reopens `run_id`); the `optimize` node builds the run's
context (evaluators, models) and runs the optimization graph (graphs/optimize.py) inside it, as a
subgraph on the server's checkpointer. With `review: "proposals"` (the default here) each branch pauses
with LangGraph's human-in-the-loop request, which Agent Chat UI shows with approve / edit / reject /
respond; the thread resumes with the UI's answer. On resume the `optimize` node starts again, rebuilds the
context and the subgraph continues from its own checkpoint: nothing is redone.

A chat client (Agent Chat UI) sends only `messages` and draws a thread, and its pauses, below its messages: the
settings may come as the last human message (JSON, or `key=value` words: `problem=examples/softmax/problem.py
iterations=2 device=cpu`), and the thread answers with a message when the run starts and when it ends.

`checkpointer` (langgraph.json's "checkpointer") keeps the server's threads in runs/langgraph.sqlite, so
they outlive a restart of `langgraph dev`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from pydantic import Field
from typing_extensions import TypedDict  # pydantic builds the input schema (Studio's form) only from this one on 3.11

from kernelwright.agents.context import (RunConfig, RunContext, RunSetupError, create_run, default, help_for,
                                        kernel_source, user_settings)
from kernelwright.evaluators.sandbox import refusal_here
from kernelwright.tools.runstore import RunError, RunStore

from kernelwright.graphs.optimize import builder, initial_state


UNSET = ("device", "actors", "provider_retry_window_s")
"""settings whose default is settled when the run is created (the server's devices, a cluster's actors) or by the
model layer"""

OWN_WORDS = {"time_budget_s": "wall-time budget in seconds (without iterations: no step limit)",
             "provider_retry_window_s": "how long a model call retries a provider's transient failures, in seconds "
                                        "(default 900); past it the run stops as failed, resumable"}
"""the settings this input takes in other units than the CLI (seconds, not 30m): its words for them"""


def _input_fields() -> dict[str, Any]:
    """The served graph's input: the problem, the seed, every run setting a user sets (`context.user_settings`, by
    RunConfig's own names and types, with its help and its default here) and where the run lives; the form Studio
    shows is made from it."""
    hints = get_type_hints(RunConfig)
    fields: dict[str, Any] = {
        "problem": Annotated[str, Field(description="the problem file (a path on the server's machine)")],
        "seed_kernel": Annotated[str | None, Field(description="the seed kernel: a file path, or its source")],
    }
    for name in user_settings():
        value = default(name, "serve")
        here = f" (default here: {value})" if value not in (None, "", {}) and name not in UNSET else ""
        fields[name] = Annotated[hints[name], Field(description=OWN_WORDS.get(name, help_for(name)) + here)]
    fields["runs_dir"] = Annotated[str, Field(description="the folder of run directories (default: runs)")]
    fields["run_id"] = Annotated[str | None, Field(description="continue this run instead of creating one")]
    # a chat client's thread: the last human message may carry the settings above (JSON or key=value words)
    fields["messages"] = Annotated[list[AnyMessage], add_messages]
    return fields


ServeInput = TypedDict("ServeInput", _input_fields(), total=False)  # type: ignore[misc]
"""what the served graph takes (JSON): made from RunConfig, so a new setting is in Studio's form and a chat message's
words as soon as it is in RunConfig"""


class ServeState(ServeInput, total=False):  # type: ignore[valid-type,misc]
    status: str
    stop_reason: str | None
    best_kernel: str | None
    best_speedup: float | None
    error: str | None


def _settings(state: ServeState) -> RunConfig:
    """The run's settings from the served graph's input: a setting not given takes this front door's default
    (`context.default(name, "serve")`: RunConfig's, or the documented exception), and the budgets are those of
    `kernelwright optimize` (`RunConfig.step_budget`: iterations given or 8, or no step limit with a time budget
    alone). A value given is kept as given (branches 0 too), so that `settle_devices` refuses it with the sentence
    every front door says; whole numbers may come as digits (a chat message's words)."""
    hints = get_type_hints(RunConfig)
    values: dict[str, Any] = {name: default(name, "serve") for name in user_settings()}
    values["device"] = ""  # not given: cuda where the server has a GPU, settled when the run is created
    for name in user_settings():
        given = state.get(name)  # type: ignore[misc]
        if given is None or given == "":
            continue
        kinds = {hints[name], *get_args(hints[name])}
        if bool in kinds:
            given = _yes_no(given)
            if not isinstance(given, bool):
                raise RunSetupError(f"{name} {given!r}: use true or false")
        elif int in kinds:
            given = _whole(given)
        elif float in kinds:
            given = _number(given)
        elif not isinstance(given, dict) and any(get_origin(k) is dict for k in kinds):
            raise RunSetupError(f"{name} {given!r}: give a JSON object (send the settings as JSON)")
        values[name] = given
    return RunConfig(**values)


def _yes_no(value: Any) -> Any:
    """A yes/no setting given as JSON's true/false or as a chat message's word (true, false, yes, no, on, off)."""
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return value


def _number(value: Any) -> Any:
    """A number given as a number or as digits (a chat message's words); anything else as it came, for
    `settings_problem` to name."""
    if not isinstance(value, str):
        return value
    try:
        return float(value)
    except ValueError:
        return value


def _whole(value: Any) -> Any:
    """A whole number given as a number or as digits (a chat message's words); anything else as it came, for
    `settings_problem` to name."""
    return int(value) if isinstance(value, str) and value.strip().isdigit() else value


SETTINGS = tuple(k for k in ServeInput.__annotations__ if k != "messages")
"""the settings a chat message may give"""


def settings_from_chat(text: str) -> dict[str, Any]:
    """The settings a chat message gives: a JSON object, or `key=value` words (numbers read as numbers). Raises
    ValueError with one sentence for a message that is neither, or names a setting that does not exist."""
    text = text.strip()
    if text.startswith("{"):
        try:
            given = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"the message is not valid JSON ({e.msg} at character {e.pos})") from None
        if not isinstance(given, dict):
            raise ValueError("give the settings as a JSON object")
    else:
        given = {}
        for word in shlex.split(text):
            key, eq, value = word.partition("=")
            if not eq:
                raise ValueError(f"{word!r} is not key=value; give the settings as JSON or key=value words, e.g. "
                                 "problem=examples/softmax/problem.py iterations=2 device=cpu")
            given[key] = int(value) if value.isdigit() else value
    unknown = [k for k in given if k not in SETTINGS]
    if unknown:
        raise ValueError(f"{unknown[0]!r} is not a setting; the settings are {', '.join(SETTINGS)}")
    return given


def _last_human(state: ServeState) -> str | None:
    for m in reversed(state.get("messages") or []):
        if isinstance(m, HumanMessage):
            return m.content if isinstance(m.content, str) else " ".join(
                p.get("text", "") for p in m.content if isinstance(p, dict))
    return None


def start(state: ServeState) -> dict[str, Any]:
    """The run's settings (the input's, or a chat client's last message), then `_start`; a chat thread is told in
    one message what started or why nothing did."""
    chat = _last_human(state) if not state.get("problem") and not state.get("run_id") else None
    given: dict[str, Any] = {}
    if chat is not None:
        try:
            given = settings_from_chat(chat)
        except ValueError as e:
            return {"error": str(e), "status": "failed", "messages": [AIMessage(f"Nothing started: {e}.")]}
    out = {**given, **_start({**state, **given})}  # type: ignore[typeddict-item]
    if state.get("messages") is not None:
        if out.get("error"):
            out["messages"] = [AIMessage(f"Nothing started: {out['error']}")]
        else:
            review = (given.get("review") or state.get("review") or default("review", "serve")) == "proposals"
            rid = out.get("run_id") or state.get("run_id")
            out["messages"] = [AIMessage(
                f"Run {rid} is under way" + (": each proposal pauses here for your decision (approve, edit or "
                                              "reject it)." if review else ", unattended.")
                + f" `kernelwright trace {rid}` follows it step by step.")]
    return out


def _start(state: ServeState) -> dict[str, Any]:
    """Create the run (or reopen `run_id`). Like every front door, it refuses to run candidates on this server
    where the OS sandbox cannot confine them, unless the server was started with KERNELWRIGHT_ALLOW_UNCONFINED=1
    (`sandbox.refusal_here`); on a Ray cluster the workers there decide."""
    runs_dir = state.get("runs_dir") or "runs"
    if state.get("run_id"):
        try:
            run = RunStore(runs_dir).open(state["run_id"])  # type: ignore[arg-type]
            cluster = run.info().config.settings.get("cluster")
        except (RunError, ValueError) as e:  # ValueError: a run.json this version cannot read
            return {"error": str(e).splitlines()[0], "status": "failed"}
        why = None if cluster else refusal_here()
        return {"error": why, "status": "failed"} if why else {}
    why = None if state.get("cluster") else refusal_here()
    if why:
        return {"error": why, "status": "failed"}
    problem = state.get("problem")
    if not problem:
        return {"error": "give the problem file's path as 'problem'", "status": "failed"}
    if not Path(problem).is_file():  # the problem first, as the API says it: without it no seed matters
        return {"error": f"{problem}: no such problem file", "status": "failed"}
    seed = state.get("seed_kernel")
    try:
        seed_src, seed_path = kernel_source(seed, "seed kernel") if seed else (None, None)
        run = create_run(problem, seed_src, _settings(state), runs_dir, seed_path)
    except RunSetupError as e:
        return {"error": str(e), "status": "failed"}
    return {"run_id": run.id, "status": "running"}


def _context(state: ServeState) -> RunContext:
    run = RunStore(state.get("runs_dir") or "runs").open(state["run_id"])  # type: ignore[arg-type]
    return RunContext.open(RunConfig.from_dict(run.info().config.settings), run)


async def optimize(state: ServeState) -> dict[str, Any]:
    """Async, because the server's checkpointer is: the roles themselves still run in threads."""
    ctx = await asyncio.to_thread(_context, state)  # file I/O stays off the server's event loop
    inner = builder().compile()  # on the server's checkpointer, as a subgraph of this node
    try:
        # a chat thread's messages ride along: a client that streams subgraphs (Agent Chat UI) is sent the inner
        # graph's states too, and draws a pause only below a message
        chat = {"messages": state["messages"]} if state.get("messages") else {}
        await inner.ainvoke({**initial_state(), **chat}, context=ctx)
    finally:
        await asyncio.to_thread(ctx.close)  # also while a review waits: the workers are not held for it
    info = await asyncio.to_thread(ctx.run.info)
    out: dict[str, Any] = {"status": info.status, "stop_reason": info.stop_reason, "best_kernel": info.best_kernel,
                           "best_speedup": info.best_speedup}
    if state.get("messages") is not None:
        best = (f"best kernel {info.best_kernel[:12]}" + (f", {info.best_speedup:.2f}x eager" if info.best_speedup
                                                         else " (untimed on this device)")) if info.best_kernel \
            else "no best kernel"
        out["messages"] = [AIMessage(f"Run {info.id}: {info.status} ({info.stop_reason}); {best}. "
                                     f"`kernelwright report {info.id}` shows every step.")]
    return out


def _route(state: ServeState) -> str:
    return END if state.get("error") else "optimize"


def served() -> StateGraph:
    g = StateGraph(ServeState, input_schema=ServeInput)
    g.add_node("start", start)
    g.add_node("optimize", optimize)
    g.add_edge(START, "start")
    g.add_conditional_edges("start", _route, ["optimize", END])
    g.add_edge("optimize", END)
    return g


graph = served().compile()
"""What langgraph.json names: the server compiles it with its own checkpointer."""


@contextlib.asynccontextmanager
async def checkpointer() -> AsyncIterator[Any]:
    """langgraph.json's checkpointer: SQLite in the runs folder, so threads outlive the server."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    path = Path(os.environ.get("KERNELWRIGHT_LANGGRAPH_DB", "runs/langgraph.sqlite"))
    path.parent.mkdir(parents=True, exist_ok=True)
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        yield saver
