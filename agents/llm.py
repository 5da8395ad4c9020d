"""The roles' language-model policies: chat models, retries, token and cost accounting, and the three
model-driven steps (analyse -> Diagnosis, strategise -> Proposal, code -> child source).

Any LangChain chat model works: a `provider:model` string goes through `init_chat_model`; with a base URL,
the OpenAI-compatible client is used (vLLM, SGLang, Ollama). Models are used through `bind_tools` only, so a
scripted fake stands in for them in tests. Knows prompts and schemas; nothing of graphs or the CLI. API keys
are read by the client from the environment and never written anywhere by this module.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from pydantic import BaseModel, ValidationError
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, stop_never

from kernelwright.tools.coding import QuickCheck, Workspace, check_workspace, coder_tools

from . import briefing
# the roles read these pieces of prompt text as llm's names; they are assembled in briefing, with the prompts
from .briefing import QUICK_CHECK_CPU, QUICK_CHECK_GPU, describe_eval, render_diagnosis, standing  # noqa: F401
from .schemas import Diagnosis, Proposal

log = logging.getLogger(__name__)

ROLES = ("analyst", "strategist", "coder")
"""The roles that use a model (the verifier and the archive never do)."""

_SPEC = re.compile(r"^[A-Za-z0-9_.\-]+:\S+$")

PROVIDER_RETRY_WINDOW_S = 900.0
"""how long one model call's transient provider failures (connection errors, 429, 5xx, timeouts) are retried by
default, from its first attempt: an outage of a quarter of an hour at night does not end the run
(`RunConfig.provider_retry_window_s`, `--provider-retry-window`)"""


class ProviderError(Exception):
    """The provider failed for good (after retries, or with an error retrying cannot fix): one sentence."""

    kind = "provider"


class ModelError(Exception):
    """The model kept answering in a form that cannot be used: one sentence."""

    kind = "model"


def valid_spec(spec: str) -> bool:
    return bool(_SPEC.match(spec))


class Models:
    """The chat models of one run: built once per model spec (branches share a client and its connection
    pool), priced from the run's own price table. Nothing here is process-wide, so two runs in one process
    keep their own clients, prices and stand-in models.

    `given` maps a spec to a ready model (tests, notebooks, applications that build their own clients)."""

    def __init__(self, base_url: str | None = None, prices: dict[str, Any] | None = None,
                 given: dict[str, BaseChatModel] | None = None, *,
                 retry_window_s: float = PROVIDER_RETRY_WINDOW_S) -> None:
        self.base_url = base_url
        self.retry_window_s = retry_window_s
        """how long each call's transient failures are retried (`invoke_with_retry`)"""
        self.stopping: Callable[[], bool] | None = None
        """whether the run was asked to stop: a call retrying through an outage then gives up at once"""
        self.watch: Callable[[str, str | None], AbstractContextManager[Any]] | None = None
        """(role, step) -> a context held for the length of each model call, retries included: the run marks
        which role waits on the model, for its live view and its log (`Run.model_call`)"""
        self.prices: dict[str, tuple[float, float]] = {k: (float(v[0]), float(v[1])) for k, v in (prices or {}).items()}
        self._given = dict(given or {})
        self._built: dict[str, BaseChatModel] = {}
        self._lock = threading.Lock()

    def chat_model(self, spec: str) -> BaseChatModel:
        """The chat model a `provider:model` spec names (ProviderError if it cannot be built)."""
        if spec in self._given:
            return self._given[spec]
        if not valid_spec(spec):
            raise ValueError(f"model {spec!r}: use provider:model, e.g. openai:gpt-4.1")
        with self._lock:
            model = self._built.get(spec)
            if model is None:
                try:
                    model = self._built[spec] = _construct(spec, self.base_url)
                except Exception as e:  # noqa: BLE001 - a missing package or key: each provider has its own class
                    raise ProviderError(f"the model {spec} cannot be used: {_first_line(e)}") from e
            return model

    def price(self, spec: str) -> tuple[float, float] | None:
        """USD per million (input, output) tokens of `spec` (or of its bare model name), if given."""
        return self.prices.get(spec) or self.prices.get(spec.split(":", 1)[-1])

    def usage(self, spec: str, role: str = "model", step: str | None = None) -> Usage:
        """A fresh usage account for one role's calls to `spec`, priced from this run's table; `role` and `step`
        say who waits while a call is in flight (`watch`)."""
        watch = self.watch
        return Usage(model=spec, price=self.price(spec), retry_window_s=self.retry_window_s, stopping=self.stopping,
                     watch=(lambda: watch(role, step)) if watch is not None else None)


def _construct(spec: str, base_url: str | None) -> BaseChatModel:
    provider, name = spec.split(":", 1)
    if base_url:
        from langchain_openai import ChatOpenAI

        # retries are ours (invoke_with_retry), so the client's own are off
        return ChatOpenAI(base_url=base_url, model=name, max_retries=0, timeout=600,
                          api_key=os.environ.get("OPENAI_API_KEY", "not-needed"))  # type: ignore[arg-type]
    from langchain.chat_models import init_chat_model

    try:
        return init_chat_model(name, model_provider=provider, max_retries=0)
    except (TypeError, ValueError):  # a provider whose client takes no max_retries
        return init_chat_model(name, model_provider=provider)


# -- accounting -------------------------------------------------------------------------------------------


@dataclass
class Usage:
    """Tokens, cost, retries and the model's reasoning text over one role's calls."""

    model: str = ""
    price: tuple[float, float] | None = None
    """USD per million (input, output) tokens; None: unknown, the calls cost 0"""
    calls: int = 0
    retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    reasoning: list[str] = field(default_factory=list)
    retry_window_s: float = PROVIDER_RETRY_WINDOW_S
    """how long each call's transient failures are retried (the run's `provider_retry_window_s`); not recorded"""
    stopping: Callable[[], bool] | None = field(default=None, repr=False, compare=False)
    """the run's stop request: retries end when it is set; not recorded"""
    watch: Callable[[], AbstractContextManager[Any]] | None = field(default=None, repr=False, compare=False)
    """held for the length of each call (`Models.watch`); not recorded"""

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, msg: BaseMessage) -> None:
        self.calls += 1
        meta = getattr(msg, "usage_metadata", None) or {}
        i, o = int(meta.get("input_tokens") or 0), int(meta.get("output_tokens") or 0)
        self.input_tokens += i
        self.output_tokens += o
        if self.price:
            self.cost_usd += (i * self.price[0] + o * self.price[1]) / 1e6
        text = reasoning_of(msg)
        if text:
            self.reasoning.append(text)

    def record(self) -> dict[str, Any]:
        """The counts so far as the fields of `tools.runstore.ModelUsage`, the one record of model usage (the
        caller adds the transcript and any error)."""
        return {"model": self.model, "calls": self.calls, "retries": self.retries, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "tokens": self.tokens, "cost_usd": round(self.cost_usd, 6),
                "reasoning": self.reasoning}


def reasoning_of(msg: BaseMessage) -> str | None:
    """The provider's reasoning text, where it returns one (additional_kwargs or reasoning/thinking blocks)."""
    extra = getattr(msg, "additional_kwargs", {}) or {}
    for k in ("reasoning_content", "reasoning", "thinking"):
        v = extra.get(k)
        if isinstance(v, str) and v.strip():
            return v
        if isinstance(v, dict) and isinstance(v.get("summary"), list):
            texts = [s.get("text", "") for s in v["summary"] if isinstance(s, dict)]
            if any(texts):
                return "\n".join(texts)
    if isinstance(msg.content, list):
        parts = []
        for b in msg.content:
            if isinstance(b, dict) and b.get("type") in ("reasoning", "thinking"):
                parts.append(b.get("reasoning") or b.get("thinking") or b.get("text") or "")
        if any(parts):
            return "\n".join(parts)
    return None


def text_of(msg: BaseMessage) -> str:
    if isinstance(msg.content, str):
        return msg.content
    return "".join(b.get("text", "") for b in msg.content if isinstance(b, dict) and b.get("type") == "text")


# -- retries ----------------------------------------------------------------------------------------------


def _status(e: BaseException) -> int | None:
    for obj in (e, getattr(e, "response", None)):
        code = getattr(obj, "status_code", None) or getattr(obj, "status", None)
        if isinstance(code, int):
            return code
    return None


def transient(e: BaseException) -> bool:
    """Rate limits (429), server errors (5xx), timeouts and dropped connections are worth retrying."""
    code = _status(e)
    if code is not None:
        return code == 429 or code >= 500
    # by the names of the class and its bases: a client may wrap its provider's errors in classes of its own
    # (langchain-openai's OpenAIConnectionError derives from openai's APIConnectionError)
    names = [c.__name__ for c in type(e).__mro__]
    return isinstance(e, (TimeoutError, ConnectionError)) or any(
        w in name for name in names for w in ("Timeout", "RateLimit", "APIConnection", "ConnectError",
                                                "ConnectionError", "ServiceUnavailable", "Overloaded"))


def _retry_after(e: BaseException | None) -> float | None:
    headers = getattr(getattr(e, "response", None), "headers", None)
    try:
        v = headers.get("retry-after") if headers is not None else None
        return None if v is None else min(float(v), 120.0)
    except (TypeError, ValueError):
        return None


def invoke_with_retry(model: Any, messages: list[BaseMessage], usage: Usage | None = None, *,
                      window_s: float | None = None, attempts: int | None = None, base_s: float = 1.0,
                      max_s: float = 60.0) -> AIMessage:
    """`model.invoke(messages)`, retried with exponential backoff (or the server's Retry-After) on transient
    failures for `window_s` seconds from the first attempt (default: the usage's `retry_window_s`, else
    PROVIDER_RETRY_WINDOW_S) and at most `attempts` times (None: no count limit), and no longer once the run is
    asked to stop. Anything else, or running out of window, raises ProviderError with one sentence."""
    window = window_s if window_s is not None else usage.retry_window_s if usage is not None else PROVIDER_RETRY_WINDOW_S
    stopping = usage.stopping if usage is not None else None
    started = time.monotonic()

    def wait(state: RetryCallState) -> float:
        e = state.outcome.exception() if state.outcome else None
        ra = _retry_after(e)
        backoff = ra if ra is not None else min(max_s, base_s * 2 ** (state.attempt_number - 1))
        return max(0.0, min(backoff, window - (time.monotonic() - started)))  # one last try at the window's end

    def stop_asked(state: RetryCallState) -> bool:
        return stopping is not None and bool(stopping())

    def before_sleep(state: RetryCallState) -> None:
        if usage is not None:
            usage.retries += 1
        e = state.outcome.exception() if state.outcome else None
        log.warning("model call failed (%s), retrying for up to %.0f s more", type(e).__name__,
                    max(0.0, window - (time.monotonic() - started)))

    stop = stop_after_delay(window) | (stop_after_attempt(attempts) if attempts else stop_never) | stop_asked
    tries = 0
    watching = usage.watch() if usage is not None and usage.watch is not None else nullcontext()
    try:
        with watching:  # the run's live view and log say who waits on the model, and for how long
            for attempt in Retrying(retry=retry_if_exception(transient), wait=wait, stop=stop,
                                    before_sleep=before_sleep, reraise=True):
                with attempt:
                    tries += 1
                    msg = model.invoke(messages)
    except Exception as e:  # noqa: BLE001 - every provider has its own error classes
        what = f"HTTP {_status(e)}" if _status(e) else type(e).__name__
        again = (f" after {tries} attempts over {time.monotonic() - started:.0f} s" if transient(e) and tries > 1
                 else "")
        raise ProviderError(f"the model provider failed{again} ({what}): {_first_line(e)}") from e
    if usage is not None:
        usage.add(msg)
    return msg  # type: ignore[return-value]


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


# -- structured answers -----------------------------------------------------------------------------------


def structured(model: BaseChatModel, schema: type[BaseModel], prompt: str, usage: Usage, *, rounds: int = 3,
               transcript: list[dict[str, Any]] | None = None) -> BaseModel:
    """Ask for one `schema` as a tool call; an invalid or missing answer goes back with the error, up to
    `rounds` times. A JSON object in the text is accepted too (servers without tool calling)."""
    bound = model.bind_tools([schema], tool_choice=schema.__name__)
    messages: list[BaseMessage] = [HumanMessage(prompt)]
    _log(transcript, messages[0], PROMPT_CHARS)
    error = ""
    for _ in range(rounds):
        ai = _turn(bound, messages, usage, transcript)
        replies: list[BaseMessage] = []
        for bad in ai.invalid_tool_calls or []:
            error = f"your tool call could not be parsed: {bad.get('error') or 'invalid JSON arguments'}"
            replies.append(_unparsed(bad, f"error: {error}; call {schema.__name__} again with valid JSON arguments"))
        for call in ai.tool_calls or []:
            if call["name"] != schema.__name__:
                error = f"unknown tool {call['name']!r}"
                replies.append(ToolMessage(f"error: {error}; call {schema.__name__}", tool_call_id=call["id"] or "",
                                           status="error"))
                continue
            try:
                return schema.model_validate(call["args"])
            except ValidationError as e:
                error = _validation_text(e)
                replies.append(ToolMessage(f"error: the answer is invalid: {error}; call {schema.__name__} again",
                                           tool_call_id=call["id"] or "", status="error"))
        if not ai.tool_calls and not ai.invalid_tool_calls:
            found = _json_object(text_of(ai))
            if found is not None:
                try:
                    return schema.model_validate(found)
                except ValidationError as e:
                    error = _validation_text(e)
            else:
                error = "no tool call"
            replies.append(HumanMessage(f"error: {error}; answer by calling the {schema.__name__} tool"))
        for r in replies:
            _log(transcript, r)
        messages += replies
    raise ModelError(f"the model gave no valid {schema.__name__} in {rounds} tries ({error})")


def _turn(bound: Any, messages: list[BaseMessage], usage: Usage,
          transcript: list[dict[str, Any]] | None) -> AIMessage:
    """One model call on the conversation so far; its answer is appended and logged."""
    ai = invoke_with_retry(bound, messages, usage)
    messages.append(ai)
    _log(transcript, ai)
    return ai


def _unparsed(bad: Any, text: str) -> ToolMessage:
    """The reply to a tool call whose arguments could not be parsed."""
    return ToolMessage(text, tool_call_id=bad.get("id") or "invalid", status="error")


def _validation_text(e: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'answer'}: {err['msg']}" for err in e.errors())[:800]


def _json_object(text: str) -> dict[str, Any] | None:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        v = json.loads(text[start:end + 1])
    except ValueError:
        return None
    return v if isinstance(v, dict) else None


PROMPT_CHARS = 200_000
"""the most of a role's prompt its transcript keeps (what the role was shown; replies keep 4000)"""


def _log(transcript: list[dict[str, Any]] | None, msg: BaseMessage, limit: int = 4000) -> None:
    if transcript is None:
        return
    entry: dict[str, Any] = {"role": msg.type, "content": text_of(msg)[:limit]}
    if isinstance(msg, AIMessage):
        if msg.tool_calls:
            entry["tool_calls"] = [{"name": c["name"], "args": c["args"]} for c in msg.tool_calls]
        if msg.invalid_tool_calls:
            entry["invalid_tool_calls"] = [{"name": c.get("name"), "args": (c.get("args") or "")[:2000],
                                            "error": c.get("error")} for c in msg.invalid_tool_calls]
        r = reasoning_of(msg)
        if r:
            entry["reasoning"] = r[:4000]
    if isinstance(msg, ToolMessage):
        entry["tool_call_id"] = msg.tool_call_id
    transcript.append(entry)


def analyse(model: BaseChatModel, *, problem: str, parent: str, evaluation: str, profile: str, usage: Usage,
            facts: str = "(not given)", transcript: list[dict[str, Any]] | None = None,
            parent_label: str = "the kernel to improve", history: str = "(none yet)", swept: str = "") -> Diagnosis:
    """The analyst's diagnosis of the parent. `history`: the lineage's last steps, so that a parent analysed again
    after a child of it failed or lost is read in the light of what was tried (not as if nothing had happened);
    `swept`: what the builtin's tuning measured around the parent (its knob moves, each timed)."""
    prompt = briefing.analyst_prompt(problem=problem, parent=parent, evaluation=evaluation, profile=profile,
                                     facts=facts, parent_label=parent_label, history=history, swept=swept)
    return structured(model, Diagnosis, prompt, usage, transcript=transcript)  # type: ignore[return-value]


def strategise(model: BaseChatModel, *, problem: str, parent: str, standing: str, diagnosis: Diagnosis,
               history: str, failed: list[str], usage: Usage,
               transcript: list[dict[str, Any]] | None = None, sibling_rank: int = 0, facts: str = "(not given)",
               evidence: str = "", inspirations: str = "(none)", predictions: str = "(none)",
               playbook: str | None = None, parent_label: str = "the kernel to improve",
               steering: str = "", coder_can: str = "", swept: str = "") -> Proposal:
    """The strategist's one proposal. It is shown the analyst's diagnosis, not a copy of what the analyst read:
    `standing` is the parent's measured numbers in one line, and `evidence` (the rendered profile) is given
    only where the analyst was the builtin policy, whose reading is too thin to stand for it."""
    prompt = briefing.strategist_prompt(
        problem=problem, parent=parent, standing=standing, diagnosis=diagnosis, history=history, failed=failed,
        sibling_rank=sibling_rank, facts=facts, evidence=evidence, inspirations=inspirations,
        predictions=predictions, playbook=playbook, parent_label=parent_label, steering=steering,
        coder_can=coder_can, swept=swept)
    p: Proposal = structured(model, Proposal, prompt, usage, transcript=transcript)  # type: ignore[assignment]
    if p.key in failed:
        raise ModelError(f"the model proposed {p.key!r}, which was already tried on this parent")
    return p


# -- the coder --------------------------------------------------------------------------------------------

def code(model: BaseChatModel, parent_source: str, proposal: Proposal, quick_check: QuickCheck, *,
         problem: str = "", usage: Usage | None = None,
         rounds: int = 12, facts: str = "(not given)", inspirations: str = "(none)",
         quick_check_text: str = briefing.QUICK_CHECK_CPU, parent_label: str = "the kernel to improve",
         coverage: str = "") -> tuple[str | None, list[dict[str, Any]]]:
    """Apply the proposal with tools; (the child's source, or None when no passing change was made, and the
    transcript). Bounded by `rounds` model calls; a malformed or failing tool call is answered with the error.
    The coder is shown the proposal (whose `why` carries the diagnosis), not the diagnosis again."""
    prompt = briefing.coder_prompt(problem=problem, parent=parent_source, proposal=proposal, facts=facts,
                                   inspirations=inspirations, quick_check_text=quick_check_text,
                                   parent_label=parent_label, coverage=coverage)
    return _edit(model, parent_source, prompt, quick_check, usage if usage is not None else Usage(), rounds)


def write(model: BaseChatModel, problem: str, quick_check: QuickCheck, *, usage: Usage | None = None,
          rounds: int = 16, facts: str = "(not given)", quick_check_text: str = briefing.QUICK_CHECK_CPU,
          rejected: tuple[str, str] | None = None, learned: str = "") -> tuple[str | None, list[dict[str, Any]]]:
    """Write a first kernel for the problem from its reference (no seed kernel given), with the coder's tools.
    `rejected`: (an earlier attempt's source, the full verifier's verdict on it) — this attempt starts from that
    source and is told why it was rejected, to repair it rather than start over. `learned`: what earlier runs
    measured on problems of its kinds (`playbook.for_writer`), shown beside the device when not empty."""
    prompt = briefing.writer_prompt(problem=problem, facts=facts, quick_check_text=quick_check_text,
                                    rejected=rejected[1] if rejected is not None else None, learned=learned)
    start = rejected[0] if rejected is not None else ""
    return _edit(model, start, prompt, quick_check, usage if usage is not None else Usage(), rounds)


def _edit(model: BaseChatModel, start: str, prompt: str, quick_check: QuickCheck, usage: Usage,
          rounds: int) -> tuple[str | None, list[dict[str, Any]]]:
    ws = Workspace(start)
    tools = {t.name: t for t in coder_tools(ws, quick_check)}
    bound = model.bind_tools(list(tools.values()))
    messages: list[BaseMessage] = [HumanMessage(prompt)]
    transcript: list[dict[str, Any]] = []
    _log(transcript, messages[0], PROMPT_CHARS)
    for _ in range(rounds):
        compact(messages)
        ai = _turn(bound, messages, usage, transcript)
        replies: list[BaseMessage] = []
        for bad in ai.invalid_tool_calls or []:
            replies.append(_unparsed(bad, f"error: the tool call could not be parsed ({bad.get('error') or 'invalid JSON'}"
                                          "); call the tool again with valid JSON arguments"))
        # in the order the model wrote them (so `quick_check` then `finish` in one reply works); once finish()
        # has succeeded, the reply's later calls are not run: the kernel finished is the kernel returned
        for call in ai.tool_calls or []:
            t = tools.get(call["name"])
            if ws.finished:
                out = "error: finish() was already called in this reply; this call was not run"
            elif t is None:
                out = f"error: unknown tool {call['name']!r}; the tools are {', '.join(tools)}"
            else:
                try:
                    out = str(t.invoke(call["args"]))
                except (ValidationError, TypeError, ValueError) as e:
                    out = f"error: bad arguments for {call['name']}: {_first_line(e)}"
            replies.append(ToolMessage(out, tool_call_id=call["id"] or "", name=call["name"],
                                       status="error" if out.startswith("error") else "success"))
        if not ai.tool_calls and not ai.invalid_tool_calls:
            replies.append(HumanMessage("Use the tools to make the change, then call finish()."))
        for r in replies:
            _log(transcript, r)
        messages += replies
        if ws.finished:
            break
    if ws.source == start or not ws.source.strip():
        return None, transcript
    if not ws.finished and not check_workspace(ws, quick_check)[0]:
        return None, transcript
    return ws.source, transcript


SUPERSEDED = "(superseded by later edits: view_kernel shows the current kernel)"

_EDITS = ("write_kernel", "search_replace")


def compact(messages: list[BaseMessage]) -> None:
    """Say things once in the coder's conversation, which is sent whole with every turn: a kernel source written
    by `write_kernel` and a `view_kernel` listing are replaced by a short note once a later edit has changed the
    kernel (the model works on the current kernel, not on its drafts), and so are the failure messages of
    quick checks run on drafts since replaced. The prompt and the latest edit stay as they were."""
    last_edit = max((i for i, m in enumerate(messages) if isinstance(m, AIMessage)
                     and any(c["name"] in _EDITS for c in m.tool_calls or [])), default=None)
    if last_edit is None:
        return
    stale_ids: set[str] = set()
    for i, m in enumerate(messages[:last_edit]):  # messages are replaced by shortened copies, never changed in place
        if not isinstance(m, AIMessage):
            continue
        calls, changed = [], False
        for c in m.tool_calls or []:
            if c["name"] == "write_kernel" and len(str(c["args"].get("source", ""))) > 3 * len(SUPERSEDED):
                lines = len(str(c["args"]["source"]).splitlines())
                c, changed = {**c, "args": {**c["args"], "source": f"({lines} lines) {SUPERSEDED}"}}, True
            elif c["name"] in ("view_kernel", "quick_check"):
                stale_ids.add(c["id"] or "")
            calls.append(c)
        if changed:
            messages[i] = m.model_copy(update={"tool_calls": calls})
    for i, m in enumerate(messages[:last_edit]):
        if isinstance(m, ToolMessage) and m.tool_call_id in stale_ids and len(str(m.content)) > 200:
            messages[i] = m.model_copy(update={"content": f"{str(m.content)[:160]}… {SUPERSEDED}"})
