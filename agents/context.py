"""What a run is (`RunConfig`: plain, saved in run.json) and what it holds while it runs (`RunContext`:
its run directory, evaluators, model clients and prices, and its stop request).

A `RunContext` is never checkpointed: the graph receives it as its run-time context, and a resumed run
builds a new one from the saved `RunConfig`. Nothing about a run lives in module globals, so two runs in
one process (a notebook, a server, a test) never share evaluators, prices or a stop request.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, NamedTuple

from kernelwright.tools.runstore import Run, RunError, RunInfo

from .proposal_review import REVIEW_MODES

if TYPE_CHECKING:  # kept out of the import: the CLI reads the settings below without loading torch or a provider
    from langchain_core.language_models import BaseChatModel

    from kernelwright.tools.evaluation import Evaluations

    from .llm import Models


Spell = Callable[[str], str]
"""a front door's spelling of a setting's name: the CLI says `--time-budget`, the MCP tools `time_budget`, the
served graph and this module `time_budget_s` (RunConfig's field)"""


def by_name(name: str) -> str:
    """The core's spelling: a setting is called by its own name (RunConfig's field, or a run's `seed_kernel`)."""
    return name


@dataclass(frozen=True)
class Said:
    """One sentence about run settings, written once with each setting's name left to the front door that shows it
    (`sentence(spell)`): the core never speaks a CLI flag to an MCP or Studio user, and the CLI still says
    `--actors`. `str()` is the core's words (the settings' own names)."""

    sentence: Callable[[Spell], str]

    def __call__(self, spell: Spell = by_name) -> str:
        return self.sentence(spell)

    def __str__(self) -> str:
        return self.sentence(by_name)


def plainly(message: str | Said) -> Said:
    """A sentence that names no setting, as a `Said` (every front door shows it as it is)."""
    return message if isinstance(message, Said) else Said(lambda _spell: message)


class SettingsSentence(Exception):
    """An error whose message is one sentence that may name run settings (`said`): `str()` gives the core's words,
    `spoken(spell)` a front door's."""

    def __init__(self, message: str | Said) -> None:
        self.said = plainly(message)
        super().__init__(str(self.said))

    def spoken(self, spell: Spell = by_name) -> str:
        return self.said(spell)


def spoken(error: BaseException, spell: Spell = by_name) -> str:
    """An error's sentence in a front door's words (`SettingsSentence.spoken`); any other error as it reads."""
    return error.spoken(spell) if isinstance(error, SettingsSentence) else str(error)


ACTORS_NEED_CLUSTER = Said(lambda s: f"{s('actors')} (the number of evaluation actors) need a Ray cluster to run on: "
                                     f"give {s('cluster')} too, or leave {s('actors')} out")
"""said by every front door, each in its own names for the two settings"""

MAX_AUTO_SPARES = 8
"""the most spare workers a device keeps by default (each is a process that imported torch)"""

NEVER = 1 << 62
"""a step count no run reaches"""

DEFAULT_ITERATIONS = 8
"""the step budget of a run given no budget at all (no iterations, time, token or cost budget)"""


def _provider_retry_window_s() -> float:
    """`llm.PROVIDER_RETRY_WINDOW_S`, read when a RunConfig is made (the model layer loads torch and langchain)."""
    from .llm import PROVIDER_RETRY_WINDOW_S

    return PROVIDER_RETRY_WINDOW_S


def setting(default: Any = MISSING, *, factory: Callable[[], Any] | None = None, help: str) -> Any:
    """A RunConfig field a user sets at every front door. `help` is what the user reads about it there (the CLI's
    --help, the MCP tool's schema, the served graph's form), in the settings' own names written `{name}`, which
    each front door spells its way (`help_for`); the field's docstring below it says what the code needs to know."""
    meta = {"help": help}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(kw_only=True)
class RunConfig:
    """How a run is configured; saved in run.json, read on resume. The one place the run settings, their defaults and
    what a user reads about them are written: a field made with `setting` is one a user sets, and every front door
    derives its own from these (the CLI's flags, the MCP tool's parameters, the served graph's input) with the
    defaults, allowed values and checks below (`user_settings`, `default`, `CHOICES`, `RANGES`, `settings_problem`)."""

    device: str = setting("cpu", help=(
        "cpu, cuda, cuda:N or cuda:0,cuda:1 (default: cuda when a GPU is present); with {cluster}: the kind "
        "of device the cluster's actors use, cuda (one GPU per actor) or cpu"))
    """a device, or a list of GPUs (cuda:0,cuda:1) over which the branches of a generation are spread; with
    `cluster`, the kind of device the cluster's actors use (cuda or cpu)"""
    cluster: str = setting("", help=(
        "evaluate on a running Ray cluster: ray (this machine's), ray://HOST:PORT or HOST:PORT"))
    """a Ray cluster to evaluate on (`ray`, `ray://HOST:PORT`, `HOST:PORT`); empty: this machine's devices"""
    actors: int = setting(0, help=(
        "with {cluster}: evaluation actors (default: one per GPU of the cluster)"))
    """with `cluster`: how many evaluation actors (one GPU each) the branches are spread over"""
    precision: str | None = setting(None, help=(
        "precision contract: fp32, tf32, bf16 or fp16 (default: the problem's PRECISION, else fp32)"))
    branches: int = setting(2, help=(
        "parents per generation (parallel branches), 1 to 64"))
    iterations: int | None = setting(None, help=(
        "candidate children to evaluate in all (default: 8 when no time, token or cost budget is given; with "
        "one, no step limit: the run goes on until that budget, a plateau, the target or a stop)"))
    """candidate children to evaluate in all (proposals a person rejected do not count); None: no step limit when
    a time, token or cost budget is given, else `DEFAULT_ITERATIONS` (`step_budget`)"""
    time_budget_s: float | None = setting(None, help=(
        "wall-time budget, e.g. 90s, 30m, 8h (without {iterations}: no step limit)"))
    """stop once the run has been driven this long (checked after each generation): the time its drivers spent on
    it, added up over resumes (run.json's `active_s`), so a run stopped and resumed hours later gets the rest of its
    budget; time waiting for a review while a driver holds the run counts, time with no driver does not"""
    token_budget: int | None = setting(None, help=(
        "stop after this many model tokens (all roles)"))
    """stop once the run's model calls have used this many tokens (checked after each generation)"""
    cost_budget_usd: float | None = setting(None, help=(
        "stop after this much model spend, USD (needs {prices})"))
    """stop once the run's model calls have cost this much, at `prices` (checked after each generation)"""
    prices: dict[str, list[float]] = setting(factory=dict, help=(
        "provider:model=IN/OUT, USD per million input/output tokens"))
    """model spec -> [USD per million input tokens, per million output tokens]"""
    plateau_steps: int = setting(20, help=(
        "stop after N steps without a new elite (never within the first two generations; 0: never stop on a "
        "plateau, e.g. for a soak)"))
    """stop after this many steps without a new elite, and never before two generations (`plateau`)"""
    provider_retry_window_s: float = setting(factory=_provider_retry_window_s, help=(
        "how long a model call retries a provider's transient failures (connection, 429, 5xx, timeouts), e.g."
        " 30m (default 15m); past it the run stops as failed, resumable"))
    """how long one model call's transient provider failures are retried with backoff; past it the run stops,
    status `failed`, resumable with `kernelwright optimize --resume`"""
    roofline_target: float | None = 0.9
    trials: int = setting(5, help=(
        "verifier trials per input family"))
    model: str = setting("builtin", help=(
        "builtin (no model) or provider:model"))
    """builtin (no model) or provider:model, the default for every role"""
    base_url: str | None = setting(None, help=(
        "OpenAI-compatible server (vLLM, SGLang, Ollama)"))
    """an OpenAI-compatible server (vLLM, SGLang, Ollama) serving the models"""
    role_models: dict[str, str] = setting(factory=dict, help=(
        "ROLE=provider:model, per role (analyst, strategist, coder)"))
    """per-role models (analyst, strategist, coder) overriding `model`"""
    seed: int = 0
    explore: float = 0.25
    review: str = setting("none", help=(
        "proposals: pause each branch after its strategist until a person decides (kernelwright chat --attach"
        " RUN_ID, the MCP server or LangGraph's UIs); none: unattended"))
    """none: unattended; proposals: each branch pauses after its strategist until a person decides (approve,
    edit, reject, respond), through `kernelwright chat`, the MCP server or LangGraph's own UIs"""
    hosts: str = setting("auto", help=(
        "judge each GPU in a process of its own: auto (when there are several GPUs), on, or off (all in one "
        "process)"))
    """on: judge each local device in a process of its own (`evaluators.hosts`), so that devices do not compete
    for one interpreter; auto: on when a generation's branches are spread over several devices; off: every
    device in the run's process. Not used with `cluster` (each actor is a process already)."""
    spares: int = 0
    """candidate workers each device (or actor) keeps started ahead of need; 0: as many as branches it takes in
    a generation (at most MAX_AUTO_SPARES), so that no branch waits for a worker to import torch"""
    profile: str = setting("auto", help=(
        "GPU evidence: profile the seed and new elites, and a losing child for a model's analyst (auto: with ncu "
        "when it can read counters; torch: torch.profiler only; off)"))
    """evidence for the roles on a GPU: auto profiles the seed and each newly admitted elite, and where a model
    analyses a timed child that lost, one per device and generation (`archiving.profile_losers`: its Nsight
    Compute headline goes into the history line of its step) (torch.profiler,
    and Nsight Compute when `ncu` exists and can read counters); torch leaves Nsight Compute out; off profiles
    nothing (the roles still see the verifier"s timing and the launched kernels" resources)"""
    knowledge: str | None = setting(None, help=(
        "the knowledge store this run reads and adds its winning steps to (default: "
        "$XDG_DATA_HOME/kernelwright/knowledge.jsonl; see kernelwright knowledge)"))
    """the knowledge store (what earlier runs learned: `tools.knowledge`), a JSON-lines file; None: the user's
    default, `$XDG_DATA_HOME/kernelwright/knowledge.jsonl`"""
    use_knowledge: bool = setting(True, help=(
        "read the knowledge store (earlier runs' results) and keep this run's winning steps in it"))
    """read the knowledge store into the strategist"s playbook and record this run"s winning steps in it; False:
    the store is neither read nor written"""
    compile_mode: str = setting("default", help=(
        "torch.compile mode every timed kernel is measured against (max-autotune: measured beside the default"
        " mode, the fastest counting)"))
    """the torch.compile mode of the compiled baseline every timed kernel is measured against: default,
    max-autotune (measured beside the default mode and its no-CUDA-graph twin, the fastest counting),
    max-autotune-no-cudagraphs, reduce-overhead, or none"""
    tune_budget: int = setting(6, help=(
        "evaluations the builtin may spend tuning the knobs (block sizes, warps, stages) of each timed "
        "structural child before the archive judges it (0: off; nothing is tuned on the CPU)"))
    """evaluations the builtin may spend tuning the knobs (block sizes, warps, stages, grouping) of each verified,
    timed structural child before the archive judges it (`agents.tuning`), within the time budget's rest; 0: off.
    Nothing is tuned on the CPU, where nothing is timed"""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """From run.json; keys this version does not know are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def step_budget(self) -> int | None:
        """The steps the run may take: `iterations` when given; else none (None) when a time, token or cost
        budget is given, so that budget, a plateau, the target or a stop ends the run; else DEFAULT_ITERATIONS."""
        if self.iterations is not None:
            return self.iterations
        if self.time_budget_s is not None or self.token_budget is not None or self.cost_budget_usd is not None:
            return None
        return DEFAULT_ITERATIONS

    def budget_words(self) -> str:
        """The run's budgets in words, as the live view, the report and the end line say them."""
        parts = []
        steps = self.step_budget()
        if steps is not None:
            parts.append(f"{steps} steps")
        if self.time_budget_s is not None:
            parts.append(f"{self.time_budget_s:.0f} s")
        if self.token_budget is not None:
            parts.append(f"{self.token_budget} tokens")
        if self.cost_budget_usd is not None:
            parts.append(f"${self.cost_budget_usd:.2f}")
        ends = "the first of " + ", ".join(parts) if len(parts) > 1 else parts[0]
        return ends + ("" if steps is not None else " (no step limit)") + ", a plateau or the roofline target"

    def model_for(self, role: str) -> str:
        """The model spec a role uses ("builtin" for none)."""
        return (self.role_models or {}).get(role) or self.model

    def uses_model(self, role: str) -> bool:
        return self.model_for(role) != "builtin"

    def device_for(self, branch: int = 0) -> str:
        """The device a branch's candidates are judged on: a list of GPUs is used round robin; the seed and
        the first branch use the first."""
        if self.cluster:
            return f"ray:{branch % max(self.actors, 1)}"
        devices = [d for d in self.device.split(",") if d]
        return devices[branch % len(devices)]

    def places(self) -> list[str]:
        """Every device (or `ray:K` actor slot) a generation's branches are judged on, the seed's first."""
        return list(dict.fromkeys(self.device_for(b) for b in range(self.branches)))

    def spares_per_device(self) -> int:
        """`spares`, or by default the branches one device (or actor) takes in a generation, within 1..MAX_AUTO_SPARES."""
        if self.spares > 0:
            return self.spares
        return max(1, min(MAX_AUTO_SPARES, -(-self.branches // len(self.places()))))

    def plateau(self) -> int:
        """Steps without a new elite after which the search stops: `plateau_steps`, but at least two generations,
        so that a wide generation (32 branches against the default 20) is never the only one a run gets; 0 never
        stops on a plateau (a soak test's run goes on until its time budget)."""
        if self.plateau_steps <= 0:
            return NEVER
        return max(self.plateau_steps, 2 * self.branches)

    def uses_hosts(self) -> bool:
        """Whether each local device is judged in a host process of its own (`hosts`)."""
        if self.cluster or self.hosts == "off":
            return False
        return self.hosts == "on" or len(self.places()) > 1

    @property
    def on_cpu(self) -> bool:
        """Candidates run in Triton's interpreter (no timing, no profiles), here or on a cluster's actors."""
        return self.device == "cpu"


# -- the settings' defaults and allowed values, for every front door ---------------------------------------

HOSTS_MODES = ("auto", "on", "off")
PROFILE_MODES = ("auto", "torch", "off")
COMPILE_MODES = ("default", "max-autotune", "max-autotune-no-cudagraphs", "reduce-overhead", "none")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
"""the precision contracts (None: the problem's PRECISION, else fp32)"""

CHOICES: dict[str, tuple[str, ...]] = {"review": REVIEW_MODES, "hosts": HOSTS_MODES, "profile": PROFILE_MODES,
                                       "compile_mode": COMPILE_MODES}
"""the settings that take one of a few words: the CLI's choices, the MCP tools' enums, `check_settings`"""

RANGES: dict[str, tuple[int, int | None]] = {"branches": (1, 64), "trials": (1, 100), "iterations": (1, None)}
"""the whole-number settings' bounds (None: no upper one)"""

MEANING = {"branches": "parents per generation, each a parallel branch",
           "trials": "verifier trials per input family",
           "iterations": "candidate children to evaluate in all"}
"""what a bounded setting counts, for the sentence that refuses a bad value"""


class DoorDefaults(NamedTuple):
    """A front door's defaults that differ from RunConfig's, and why its purpose needs them."""

    values: dict[str, Any]
    why: str


FRONT_DOOR_DEFAULTS: dict[str, DoorDefaults] = {
    "optimize": DoorDefaults({}, "the unattended run: RunConfig's defaults as they are"),
    "chat": DoorDefaults({"review": "proposals", "branches": 1},
                         "a person reviews each proposal as it comes: it pauses for them, one branch at a time"),
    "mcp": DoorDefaults({"review": "proposals"},
                        "a chat client's model drives the run through reviews (no API key inside kernelwright)"),
    "serve": DoorDefaults({"review": "proposals", "branches": 1},
                          "Studio and Agent Chat UI exist to review proposals: a person decides each pause in turn"),
}
"""the only front-door defaults that are not RunConfig's (every front door reads them through `default`)"""


def default(name: str, door: str | None = None) -> Any:
    """A setting's default at a front door (`FRONT_DOOR_DEFAULTS`, else RunConfig's own); KeyError for a name that
    is no setting."""
    if door is not None and name in FRONT_DOOR_DEFAULTS[door].values:
        return FRONT_DOOR_DEFAULTS[door].values[name]
    f = {f.name: f for f in fields(RunConfig)}[name]
    return f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default


def user_settings() -> list[str]:
    """The RunConfig fields a user sets (those made with `setting`), in RunConfig's order: every front door takes each
    of them (the others, such as the builtin's `explore`, are the code's own)."""
    return [f.name for f in fields(RunConfig) if "help" in f.metadata]


def help_for(name: str, spell: Spell = by_name) -> str:
    """What a user reads about a setting (`setting`'s help), with the settings it names spelled as `spell` says."""
    text = {f.name: f for f in fields(RunConfig)}[name].metadata["help"]
    return re.sub(r"\{(\w+)\}", lambda m: spell(m.group(1)), text)


def _words(choices: tuple[str, ...]) -> str:
    return ", ".join(choices[:-1]) + " or " + choices[-1] if len(choices) > 1 else choices[0]


def settings_problem(config: RunConfig) -> Said | None:
    """The first setting of `config` no run can take, in one sentence that leaves the settings' names to the front
    door that shows it (`Said`: the CLI says --branches, the MCP tools and the served graph branches); None when
    every setting is usable."""
    for name, choices in CHOICES.items():
        value = getattr(config, name)
        if value not in choices:
            return Said(lambda s, name=name, value=value, choices=choices:
                        f"{s(name)} {value!r}: use {_words(choices)}")
    for name, (low, high) in RANGES.items():
        value = getattr(config, name)
        if value is None and name == "iterations":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
            span = f"from {low} to {high}" if high is not None else f"of at least {low}"
            return Said(lambda s, name=name, value=value, span=span:
                        f"{s(name)} {value!r}: use a whole number {span} ({MEANING[name]})")
    if config.actors and not config.cluster:
        return ACTORS_NEED_CLUSTER
    knowledge = config.knowledge
    if knowledge is not None and not config.use_knowledge:
        return Said(lambda s: f"{s('knowledge')} and {s('use_knowledge')} contradict each other: give one")
    if knowledge is not None and Path(knowledge).expanduser().is_dir():
        return Said(lambda s: f"{s('knowledge')} {knowledge} is a folder: give the knowledge store's file")
    return _models_problem(config)


def _models_problem(config: RunConfig) -> Said | None:
    """The models named must be well formed (builtin or provider:model, for roles that exist), and a base URL and
    the model budgets need a model to apply to (a cost budget, its price too)."""
    from .llm import ROLES, valid_spec  # here: reading the settings above loads no provider

    specs = sorted({s for s in [config.model, *config.role_models.values()] if s != "builtin"})
    model, url = config.model, config.base_url
    if model != "builtin" and not valid_spec(model):
        return Said(lambda s: f"{s('model')} {model!r}: use builtin or provider:model, e.g. openai:gpt-4.1")
    for role, spec in config.role_models.items():
        if role not in ROLES:
            return Said(lambda s, role=role, spec=spec: f"{s('role_models')} {role}={spec}: use ROLE=provider:model "
                        f"with ROLE one of {', '.join(ROLES)}")
        if spec != "builtin" and not valid_spec(spec):
            return Said(lambda s, role=role, spec=spec: f"{s('role_models')} {role}={spec}: the model must be builtin "
                        "or provider:model, e.g. openai:gpt-4.1")
    if url and not specs:
        return Said(lambda s: f"{s('base_url')} needs a model: give one with {s('model')} provider:model")
    if url and not re.match(r"^https?://", url):
        return Said(lambda s: f"{s('base_url')} {url!r}: give an http:// or https:// URL")
    if (config.token_budget is not None or config.cost_budget_usd is not None) and not specs:
        return Said(lambda s: f"{s('token_budget')} and {s('cost_budget_usd')} limit model calls: the builtin policy "
                    "makes none")
    unpriced = [s for s in specs if s not in config.prices]
    if config.cost_budget_usd is not None and unpriced:
        first = unpriced[0]
        return Said(lambda s: f"{s('cost_budget_usd')} needs the price of {first}: give {s('prices')} {first}=IN/OUT "
                    "(USD per million input/output tokens)")
    return None


def check_settings(config: RunConfig) -> None:
    """RunSetupError with `settings_problem`'s sentence when a setting is unusable; every front door calls it (through
    `settle_devices` when a run is created or moved, and earlier where it can say so before any work)."""
    why = settings_problem(config)
    if why:
        raise RunSetupError(why)


class RunContext:
    """One run's live resources. Build it with `open()`; `close()` stops its workers."""

    def __init__(self, config: RunConfig, run: Run, evaluations: Evaluations, models: Models) -> None:
        self.config = config
        self.run = run
        self.evaluations = evaluations
        self.models = models
        self._stop = threading.Event()
        # a model call retrying through a provider's outage gives up when the run is asked to stop (Ctrl-C)
        models.stopping = lambda: self.stop_requested
        # the run's progress says which role waits on the model, and for how long (live view, log)
        models.watch = run.model_call
        try:
            info = run.info()
            before = info.active_s if info.active_s is not None else _legacy_active_s(info)
        except RunError:  # no run.json to read: nothing was spent on it yet
            before = 0.0
        self._active_before = before
        """the seconds earlier drivers spent on the run (`RunInfo.active_s`)"""
        self._opened = time.monotonic()

    @classmethod
    def open(cls, config: RunConfig, run: Run, models: dict[str, BaseChatModel] | None = None) -> RunContext:
        """The resources for `run` under `config`. `models` gives ready chat models by spec (tests and
        applications that build their own clients); the others are built from their specs when first used."""
        from kernelwright.tools.evaluation import Evaluations

        from .llm import Models

        return cls(config, run, Evaluations(run, config.precision, config.trials, config.spares_per_device(),
                                            config.cluster, config.device, hosts=config.uses_hosts(),
                                            compile_mode=config.compile_mode),
                   Models(config.base_url, config.prices, models, retry_window_s=config.provider_retry_window_s))

    def request_stop(self) -> None:
        """Ask the run to stop once the generation in flight is finished and checkpointed."""
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        """Asked here (`request_stop`) or by another process through the run's review desk."""
        from kernelwright.tools.review_desk import ReviewDesk

        return self._stop.is_set() or ReviewDesk(self.run).stop_requested()

    def active_seconds(self) -> float:
        """How long the run has been driven: what earlier drivers spent on it plus this one's time so far. The
        time budget counts this, not the time since the run was created."""
        return self._active_before + (time.monotonic() - self._opened)

    def close(self) -> None:
        try:
            self.run.update(active_s=round(self.active_seconds(), 3))  # the next driver counts on from here
            self.run.end_progress()  # whatever drove it (a handle, the served graph) has let go
        except (RunError, OSError):  # the run directory went away: nothing to keep the time in
            pass
        self.evaluations.close()


def _legacy_active_s(info: RunInfo) -> float:
    """A run.json without `active_s` (an earlier version's): its time from creation to its last update, the best
    guess of how long it was driven; 0 for a run never driven."""
    if info.status == "created":
        return 0.0
    try:
        spent = time.mktime(time.strptime(info.updated, "%Y-%m-%dT%H:%M:%S")) - \
            time.mktime(time.strptime(info.created, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, TypeError):
        return 0.0
    return max(0.0, spent)


class RunSetupError(SettingsSentence):
    """A run that cannot be created (a bad problem file, an unusable device, a bad setting); the message is one
    sentence, in the front door's words where it names a setting (`spoken`)."""


def check_cluster(config: RunConfig) -> None:
    """Connect to the config's Ray cluster and settle the actors' kind (`device`: cuda when the cluster has
    GPUs, unless cpu is asked for) and number (default: one per GPU); RunSetupError with one sentence when the
    cluster cannot hold them. Written back into `config`."""
    from kernelwright.evaluators.cluster import ClusterError, settle

    try:
        _, kind, actors = settle(config.cluster, config.device, config.actors)
    except ClusterError as e:
        raise RunSetupError(str(e)) from None
    config.device, config.actors = kind, actors


def settle_devices(config: RunConfig) -> None:
    """Where the config's run evaluates, resolved and written back into `config`: the Ray cluster's actors
    (`check_cluster`), or the local devices (`cuda:0,cuda:1`, `cuda`, `cpu`; by default cuda when present).
    RunSetupError, one sentence, for an unusable one."""
    from kernelwright.evaluators import DeviceError, resolve_device

    check_settings(config)
    if config.cluster:
        check_cluster(config)
        return
    try:
        devs = [resolve_device(d.strip()) for d in config.device.split(",")] if config.device else [resolve_device(None)]
    except DeviceError as e:
        raise RunSetupError(str(e)) from None
    if len({d.type for d in devs}) > 1:
        given = config.device
        raise RunSetupError(Said(lambda s: f"{s('device')} {given}: list GPUs only (cuda:0,cuda:1) or cpu, not a mix"))
    config.device = ",".join(dict.fromkeys(str(d) for d in devs))


def kernel_file(given: str | Path) -> Path | None:
    """The file a kernel given as a path or as its source names (None: `given` is the source itself). The one rule
    every front door uses (the API, the MCP tools, the served graph): a Path, or text of one line, names a file,
    whether it exists yet or not (so a mistyped path is refused as a missing file, not judged as a kernel); text of
    several lines is source, whatever it holds (a `/` in a division, a `.py` in a comment). A kernel's source needs
    several lines (imports, a Triton kernel, ModelNew), so no real kernel is mistaken for a path."""
    if isinstance(given, Path):
        return given
    text = given.strip()
    return None if "\n" in text or not text else Path(text)


def kernel_source(given: str | Path, what: str = "seed kernel") -> tuple[str, str | None]:
    """A kernel given as a path or as its source (`kernel_file`'s rule): its source text and the file it came from
    (None for source given as text). RunSetupError, one sentence, for a file that is missing or unreadable."""
    path = kernel_file(given)
    if path is None:
        return str(given), None
    if not path.is_file():
        raise RunSetupError(f"{path}: no such {what} file")
    try:
        return path.read_text(), str(path)
    except (OSError, UnicodeDecodeError) as e:
        raise RunSetupError(f"{path}: cannot be read ({e})") from None


def create_run(problem: str | Path, seed_src: str | None, config: RunConfig, runs_dir: str | Path = "runs",
               seed_path: str | None = None) -> Run:
    """A new run directory for `problem` (checked by loading it) on the config's devices (resolved and
    written back into `config`), with the seed kernel stored and the config saved in run.json."""
    from kernelwright.evaluators import ProblemError, load_problem
    from kernelwright.tools.runstore import RunStore

    try:
        prob = load_problem(Path(problem), config.precision)
        settle_devices(config)
    except ProblemError as e:
        raise RunSetupError(str(e)) from None
    run = RunStore(runs_dir).create(str(problem), prob.source, {})
    h = run.put_kernel(seed_src) if seed_src is not None else None
    run.update(config={"seed_kernel": h, "seed_path": seed_path, "settings": config.as_dict()})
    return run
