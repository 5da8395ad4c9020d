"""The `kernelwright` command.

Exit status: 0 when the candidate is verified correct, 1 when it is rejected, 2 for a usage error, a
broken problem or an unusable device. With `--json`, stdout carries exactly one JSON object.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

# the run settings' defaults and allowed values, defined once beside RunConfig (a light import: no torch, no provider)
from kernelwright.agents.context import (CHOICES, COMPILE_MODES, DEFAULT_ITERATIONS, HOSTS_MODES, PRECISIONS,
                                        PROFILE_MODES, RANGES, default, help_for, spoken, user_settings)

if TYPE_CHECKING:
    from kernelwright.agents.context import RunConfig

try:  # typer >= 0.2x vendors click and raises its own exceptions; older typer uses click's
    from typer import TyperException as _ParseError
except ImportError:  # pragma: no cover
    from click import ClickException as _ParseError

app = typer.Typer(
    name="kernelwright",
    help="Make GPU kernels faster, judged by a verifier nothing can fool.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
out = Console()


def _flags_take_no_value() -> None:
    """typer's rich help prints `<bool>` beside every flag (`--json <bool>`), as if it took a value: show a
    flag as the bare flag it is. Applied to the option class, so every command's flags read the same."""
    try:
        from typer.core import TyperOption
    except ImportError:  # pragma: no cover - a typer without the rich help
        return
    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "_kernelwright", False):
        return

    def display_type_rich(self, ctx):  # type: ignore[no-untyped-def]
        if getattr(self, "is_flag", False) and not getattr(self, "count", False):
            return None
        return shown(self, ctx)

    display_type_rich._kernelwright = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_take_no_value()
_VERBOSE = False
"""--verbose was given (the root option): commands show what they otherwise keep short (eval's phases)"""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kernelwright")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from kernelwright import __version__

        return str(__version__)


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"kernelwright {_version()}\n")
        raise typer.Exit(0)


def _choices(name: str, values: tuple[str, ...]) -> type[Enum]:
    """An option's choices as typer wants them (a str Enum), from the allowed values `agents.context` defines once;
    a member's name is its value with - as _ (CompileMode.max_autotune is "max-autotune")."""
    return Enum(name, {v.replace("-", "_"): v for v in values}, type=str)  # type: ignore[return-value]


CompileMode = _choices("CompileMode", COMPILE_MODES)
ProfileOpt = _choices("ProfileOpt", PROFILE_MODES)
HostsOpt = _choices("HostsOpt", HOSTS_MODES)
ReviewOpt = _choices("ReviewOpt", CHOICES["review"])
PrecisionOpt = _choices("PrecisionOpt", PRECISIONS)


class TransportOpt(str, Enum):
    stdio = "stdio"
    http = "http"


def _usage_error(message: str | BaseException) -> typer.Exit:
    """One sentence on stderr, exit 2; an error that names run settings names them by their flags."""
    text = spoken(message, flag) if isinstance(message, BaseException) else message
    # escape: the message quotes problem/candidate text, which may look like rich markup ("[/x]");
    # soft_wrap: the one sentence stays one line when stderr is not a terminal.
    err.print(f"[bold red]error:[/] {escape(text)}", soft_wrap=True)
    return typer.Exit(2)


def _json_error(message: str, reason: str = "usage_error") -> None:
    """--json still means exactly one JSON object on stdout, also for errors. `reason` is usage_error
    (a bad flag or an unusable device), bad_problem, evaluator_error or unconfined (no OS sandbox here)."""
    sys.stdout.write(json.dumps({"verdict": "error", "reason": reason, "detail": message, "rule": None,
                                 "checks": [], "max_rel_error": None, "tolerance": None, "timing": None,
                                 "timing_unavailable": "nothing was evaluated", "phases": {}}) + "\n")


AllowUnconfinedOpt = Annotated[bool, typer.Option(
    "--allow-unconfined", help="run candidate code even where the OS sandbox (Landlock and seccomp) cannot confine "
                               "it, only on a machine you trust; the same as KERNELWRIGHT_ALLOW_UNCONFINED=1")]


def _confinement(allow_unconfined: bool, as_json: bool = False, here: bool = True) -> bool:
    """The check every command that runs candidate code makes before it starts anything
    (`sandbox.refusal_here`, as the API and the MCP server do): where the OS sandbox cannot confine a candidate
    and the user did not opt out by name, one sentence and exit 2. `--allow-unconfined` goes into this
    process's environment, so that everything the command starts (a run's evaluators, device hosts) gets the
    same opt-out. `here`: candidates run on this machine (not on a Ray cluster, whose workers decide).
    Returns whether the user opted out."""
    from kernelwright.evaluators.sandbox import ALLOW_UNCONFINED_ENV, allowed_by_environment, refusal_here, unavailable

    if allow_unconfined:
        os.environ[ALLOW_UNCONFINED_ENV] = "1"
    allowed = allowed_by_environment()
    if here:
        why = refusal_here(allowed)
        if why:
            raise _fail(why, as_json, "unconfined")
        missing = unavailable() if allowed else None
        if missing:
            err.print(f"[yellow]warning:[/] candidate code runs unconfined here ({escape(missing)}): you allowed it",
                      soft_wrap=True)
    return allowed


@app.callback()
def _root(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="log what happens underneath, and show "
                                                                      "eval's phases")] = False,
          version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                                help="print the installed version and exit")] = False) -> None:
    global _VERBOSE
    _VERBOSE = verbose
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")


@app.command("eval")
def eval_cmd(
    problem: Annotated[Path, typer.Argument(help="problem file (KernelBench format: Model, get_inputs, get_init_inputs)")],
    candidate: Annotated[Path, typer.Argument(help="candidate file defining ModelNew with Triton kernels")],
    device: Annotated[Optional[str], typer.Option(help="cpu, cuda or cuda:N (default: cuda when a GPU is present)")] = None,
    precision: Annotated[Optional[PrecisionOpt], typer.Option(help="precision contract (default: the problem's PRECISION, else fp32)")] = None,
    trials: Annotated[int, typer.Option(min=1, max=100, help="trials per input family")] = 5,
    compile_mode: Annotated[CompileMode, typer.Option(help="torch.compile mode of the compiled baseline")] = CompileMode.default,
    as_json: Annotated[bool, typer.Option("--json", help="print exactly one JSON object on stdout")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="also show where the evaluation's time went "
                                                                  "(its phases)")] = False,
    allow_unconfined: AllowUnconfinedOpt = False,
) -> None:
    """Verify a candidate kernel against a problem (and time it on a GPU)."""
    allowed = _confinement(allow_unconfined, as_json)
    result, prob = _evaluate(problem, candidate, device, precision, trials, compile_mode, as_json, allowed)
    if as_json:
        sys.stdout.write(result.model_dump_json() + "\n")
    elif result.verdict == "error":  # not a verdict on the candidate: one sentence on stderr
        raise _usage_error(result.detail)
    else:
        _print_result(result, prob.path, str(candidate), verbose)
    raise typer.Exit(0 if result.passed else 2 if result.verdict == "error" else 1)


@app.command("baseline")
def baseline_cmd(
    problems: Annotated[list[Path], typer.Argument(help="problem files (KernelBench format)")],
    device: Annotated[Optional[str], typer.Option(help="cpu, cuda or cuda:N (default: cuda when a GPU is present)")] = None,
    precision: Annotated[Optional[PrecisionOpt], typer.Option(help="precision contract (default: each problem's own)")] = None,
    trials: Annotated[int, typer.Option(min=1, max=100, help="reference trials per input family")] = 5,
    compile_mode: Annotated[CompileMode, typer.Option(help="torch.compile mode of the compiled baseline")] = CompileMode.default,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per problem, one per line")] = False,
) -> None:
    """Check problems before a run: memory plan, reference battery, eager and torch.compile timings, roofline
    floor and the wall time of each phase, without any candidate. Exit 2 if any problem cannot be evaluated."""
    from kernelwright.evaluators import DeviceError, EvalPolicy, Evaluator, ProblemError, load_problem, resolve_device

    try:
        dev = resolve_device(device)
    except DeviceError as e:
        raise _fail(e, as_json) from None
    rows = []
    for path in problems:
        try:
            prob = load_problem(path, precision.value if precision else None)
            policy = EvalPolicy(trials=trials, compile_mode=_mode(compile_mode), spares=0)
            with Evaluator(prob, str(dev), policy) as evaluator:
                row = evaluator.baseline()
        except ProblemError as e:
            row = {"problem": str(path), "verdict": "error", "reason": "bad_problem", "detail": str(e)}
        except Exception as e:  # noqa: BLE001 - one broken problem must not end the survey
            row = {"problem": str(path), "verdict": "error", "reason": "evaluator_error",
                   "detail": f"{type(e).__name__}: {str(e)[:400]}"}
        rows.append(row)
        if as_json:
            sys.stdout.write(json.dumps(row, default=str) + "\n")
            sys.stdout.flush()
        else:
            _print_baseline(row, timed=dev.type != "cpu")
    raise typer.Exit(2 if any(r.get("verdict") == "error" for r in rows) else 0)


def _print_baseline(r: dict, timed: bool = True) -> None:  # type: ignore[type-arg]
    """One problem's survey; `timed` False (the CPU, where nothing is timed) leaves out the timing's words."""
    p = Path(str(r.get("problem")))
    name = f"{p.parent.name}/{p.name}" if p.stem == "problem" else p.name
    if r.get("verdict") == "error":
        out.print(f"[bold red]ERROR[/] [dim]{r.get('reason')}[/]  {escape(name)}: {escape(str(r.get('detail')))}",
                  soft_wrap=True)
        return
    mem = r.get("memory") or {}
    parts = [f"inputs {r.get('inputs_gb', 0):.2f} GB", f"gold {r.get('gold_precision')}",
             f"{r.get('trials')} trials", f"PyTorch's own error {r.get('pytorch_error', 0):.2g}"]
    if r.get("eager_ms") is not None:
        parts.append(f"eager {r['eager_ms']:.4g} ms")
    if r.get("compile_ms") is not None:
        parts.append(f"compile {r['compile_ms']:.4g} ms ({r.get('compile_mode')})")
    if r.get("floor_ms") is not None:
        parts.append(f"floor {r['floor_ms']:.4g} ms ({r.get('bound')})")
    if timed and mem.get("timing_sets") is not None:
        parts.append(f"{mem['timing_sets']} timing sets")
    if r.get("trusted_peak_bytes"):
        parts.append(f"peak {r['trusted_peak_bytes'] / 1e9:.2f} GB")
    out.print(f"[bold green]OK[/] {escape(name)}: " + ", ".join(parts), soft_wrap=True, highlight=False)
    phases = ", ".join(f"{k} {v:.2f}" for k, v in (r.get("phases") or {}).items())
    out.print(f"[dim]  phases (s): {phases}[/]")
    for note in r.get("notes") or []:
        out.print(f"[yellow]  note:[/] {escape(str(note))}", soft_wrap=True)


@app.command("profile")
def profile_cmd(
    problem: Annotated[Path, typer.Argument(help="problem file (KernelBench format)")],
    candidate: Annotated[Path, typer.Argument(help="candidate file defining ModelNew with Triton kernels")],
    device: Annotated[Optional[str], typer.Option(help="cpu, cuda or cuda:N (default: cuda when a GPU is present)")] = None,
    precision: Annotated[Optional[PrecisionOpt], typer.Option(help="precision contract")] = None,
    ncu: Annotated[bool, typer.Option("--ncu", help="also collect Nsight Compute metrics (needs ncu and counter access)")] = False,
    compile_mode: Annotated[CompileMode, typer.Option(help="torch.compile mode of the compiled baseline")] = CompileMode.default,
    as_json: Annotated[bool, typer.Option("--json", help="print exactly one JSON object on stdout")] = False,
    allow_unconfined: AllowUnconfinedOpt = False,
) -> None:
    """Verify, time and profile a candidate: kernel resources, device-time breakdown, Nsight Compute metrics."""
    from kernelwright.evaluators import DeviceError, EvalPolicy, Evaluator, ProblemError, load_problem, resolve_device

    allowed = _confinement(allow_unconfined, as_json)
    source = _read_candidate(candidate, as_json)
    try:
        dev = resolve_device(device)
        prob = load_problem(problem, precision.value if precision else None)
        if dev.type == "cpu" and not as_json:  # said before the verification's minute, not after it
            err.print("on the CPU a profile only verifies the candidate and names its kernels (Triton's interpreter "
                      "runs them); timing, the device-time breakdown, compiled resources and Nsight Compute need a "
                      "GPU. Verifying…", markup=False, highlight=False, soft_wrap=True)
        policy = EvalPolicy(compile_mode=_mode(compile_mode), allow_unconfined=allowed)
        with Evaluator(prob, str(dev), policy) as evaluator:
            prof = evaluator.profile(source, ncu=ncu and dev.type != "cpu")
    except ProblemError as e:
        raise _fail(e, as_json, "bad_problem") from None
    except DeviceError as e:
        raise _fail(e, as_json) from None
    if as_json:
        sys.stdout.write(prof.model_dump_json() + "\n")
    else:
        colour = "green" if prof.verdict == "pass" else "red"
        out.print(f"[bold {colour}]{prof.verdict.upper()}[/] [dim]{prof.reason}[/]  {escape(str(candidate))} on "
                  f"{escape(str(problem))}")
        out.print(prof.text, markup=False, highlight=False)
    raise typer.Exit(0 if prof.verdict == "pass" else 1)


SeedKernelOpt = Annotated[Optional[Path], typer.Option("--seed-kernel", help="a working candidate to start from")]
RunDirOpt = Annotated[Path, typer.Option("--run-dir", help="folder of run directories")]


# -- the run settings' flags, derived from RunConfig ---------------------------------------------------------


def _duration(flag_name: str) -> Callable[[str], float]:
    def read(text: str) -> float:
        from kernelwright.optimize_command import parse_duration

        return parse_duration(text, flag_name)
    return read


def _role_models(items: list[str] | dict[str, str]) -> dict[str, str]:
    from kernelwright.optimize_command import parse_role_models

    return dict(items) if isinstance(items, dict) else parse_role_models(items)


def _prices(items: list[str] | dict[str, list[float]]) -> dict[str, list[float]]:
    from kernelwright.optimize_command import parse_prices

    return dict(items) if isinstance(items, dict) else parse_prices(items)


@dataclass(frozen=True)
class Flag:
    """How the CLI takes one run setting (a RunConfig field made with `context.setting`, whose help it shows): the
    flag's spelling where it is not the field's name with - for _, the type typer parses, and how that value
    becomes the field's. Defaults are not written here: a flag's default is the setting's at the command's door
    (`context.default`), or None where "not given" must stay visible (RunConfig's default then applies; with
    --resume, the run's own place is kept)."""

    setting: str
    kind: Any
    """the option's type as typer parses it"""
    spelling: str = ""
    read: Callable[[Any], Any] | None = None
    """the flag's value -> the field's (None: as given; a choice gives its word)"""
    unset: bool = False
    """the option's default is None, "not given" (RunConfig's default applies)"""
    note: str = ""
    """what the flag means to the CLI only (with --resume), after the setting's help"""
    option: dict[str, Any] = field(default_factory=dict)
    """typer.Option's extras (min, max, metavar, a help of the flag's own for a negated flag)"""

    @property
    def flag(self) -> str:
        return self.spelling or "--" + self.setting.replace("_", "-")

    @property
    def param(self) -> str:
        """The command's parameter name (what --help's tests and `_ignored_with_resume` see)."""
        return self.flag.removeprefix("--").replace("-", "_")


FLAGS: tuple[Flag, ...] = (
    Flag("model", str),
    Flag("base_url", Optional[str], unset=True),
    Flag("role_models", Optional[list[str]], "--role-model", _role_models, unset=True),
    Flag("iterations", Optional[int], unset=True),
    Flag("time_budget_s", Optional[str], "--time-budget", _duration("--time-budget"), unset=True),
    Flag("branches", int),
    Flag("device", Optional[str], read=lambda v: v or "", unset=True, note="with --resume, move the run here"),
    Flag("precision", Optional[PrecisionOpt], unset=True),
    Flag("trials", int, option={"min": RANGES["trials"][0], "max": RANGES["trials"][1]}),
    Flag("token_budget", Optional[int], unset=True, option={"min": 1}),
    Flag("cost_budget_usd", Optional[float], "--cost-budget", unset=True, option={"min": 0.0}),
    Flag("prices", Optional[list[str]], "--price", _prices, unset=True),
    Flag("profile", ProfileOpt),
    Flag("review", ReviewOpt),
    Flag("cluster", Optional[str], unset=True),
    Flag("actors", Optional[int], unset=True, option={"min": 1}),
    Flag("hosts", Optional[HostsOpt], unset=True, note="with --resume, change it"),
    Flag("provider_retry_window_s", Optional[str], "--provider-retry-window", _duration("--provider-retry-window"),
         unset=True),
    Flag("tune_budget", int, option={"min": 0, "metavar": "N"}),
    Flag("knowledge", Optional[Path], read=lambda v: str(Path(v).expanduser()), unset=True,
         option={"metavar": "PATH"}),
    Flag("use_knowledge", bool, "--no-knowledge", lambda v: not v,
         option={"help": "leave the knowledge store out: earlier runs' results are not shown, and this run's are not "
                         "kept"}),
    Flag("compile_mode", CompileMode),
    Flag("plateau_steps", int, option={"min": 0, "metavar": "N"}),
)
"""every run setting a user may set (`context.user_settings`), as optimize and chat take it, in --help's order"""

_BY_SETTING = {f.setting: f for f in FLAGS}
_BY_PARAM = {f.param: f for f in FLAGS}


def flag(name: str) -> str:
    """A run setting's flag, as the CLI says it where the core names the setting (`context.Said`)."""
    known = _BY_SETTING.get(name)
    return known.flag if known else "--" + name.replace("_", "-")


def _flag_default(f: Flag, door: str) -> Any:
    if f.unset:
        return None
    value = default(f.setting, door)
    if f.read is not None and f.kind is bool:  # a negated flag (--no-knowledge): set means the setting's opposite
        return not value
    return f.kind(value) if isinstance(f.kind, type) and issubclass(f.kind, Enum) else value


def _flag_parameter(f: Flag, door: str, notes: bool = True) -> inspect.Parameter:
    extras = dict(f.option)
    words = extras.pop("help", None) or help_for(f.setting, flag)
    if f.note and notes:
        words += f"; {f.note}"
    option = typer.Option(f.flag, help=words, **extras)
    return inspect.Parameter(f.param, inspect.Parameter.KEYWORD_ONLY, default=_flag_default(f, door),
                             annotation=Annotated[f.kind, option])


class Given:
    """The run settings' flags as a command received them; `config()` makes them the run's RunConfig."""

    def __init__(self, door: str, values: Mapping[str, Any]) -> None:
        self.door = door
        self.values = dict(values)

    def __getitem__(self, setting: str) -> Any:
        """The flag's value as given (a choice as its word; None when not given)."""
        value = self.values.get(_BY_SETTING[setting].param)
        return value.value if isinstance(value, Enum) else value

    def config(self, **fixed: Any) -> RunConfig:
        """The RunConfig these flags make (`fixed`: fields the command sets itself); UsageError, one sentence, for a
        bad value."""
        return settings_config(self.door, self.values, **fixed)


def settings_config(door: str, values: Mapping[str, Any], **fixed: Any) -> RunConfig:
    """The RunConfig that a command's run-setting flags make: each value read as its flag reads it (`FLAGS`); a value
    None, or a flag left out, takes the setting's default at `door` (`context.default`). Keys are the flags' parameter
    names (time_budget), or the fields' own (role_models, given as a list of ROLE=MODEL words as the flag takes them).
    UsageError with one sentence for a bad setting (`context.settings_problem`, the sentence every front door says)."""
    from kernelwright import api
    from kernelwright.agents.context import settings_problem

    fields_: dict[str, Any] = {name: default(name, door) for name in user_settings()}
    fields_["device"] = ""  # not given: cuda where there is a GPU, settled when the run is created
    for key, value in values.items():
        f = _BY_PARAM.get(key) or _BY_SETTING.get(key)
        if f is None:
            raise TypeError(f"{key!r} is not a run setting's flag")
        if isinstance(value, Enum):
            value = value.value
        if value is None and f.setting != "device":
            continue
        fields_[f.setting] = f.read(value) if f.read is not None and (key == f.param or isinstance(value, list)) \
            else value
    if fields_["provider_retry_window_s"] is None:
        del fields_["provider_retry_window_s"]
    config = api.RunConfig(**{**fields_, **fixed})
    why = settings_problem(config)
    if why:
        raise api.UsageError(why)
    return config


def run_settings(door: str, only: tuple[str, ...] | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command that takes the run settings' flags (`FLAGS`, or `only` those, without the notes on --resume: a
    command that takes a few does not resume runs), made from RunConfig where its `given` parameter stands: the
    command receives them as `given` (a `Given`). A setting added to RunConfig with `setting` and a row in FLAGS is
    on every such command, with its help and its default at the door."""
    flags = [f for f in FLAGS if only is None or f.setting in only]

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        own = inspect.signature(fn, eval_str=True)
        params: list[inspect.Parameter] = []
        for p in own.parameters.values():
            if p.name == "given":
                params += [_flag_parameter(f, door, notes=only is None) for f in flags]
            else:
                params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))  # typer passes every one by name
        names = {f.param for f in flags}

        @functools.wraps(fn)
        def command(**kw: Any) -> Any:
            given = Given(door, {k: v for k, v in kw.items() if k in names})
            return fn(**{k: v for k, v in kw.items() if k not in names}, given=given)

        command.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        del command.__wrapped__  # typer reads the signature above, not fn's
        return command

    return wrap


RESUME_KEEPS = ("device", "cluster", "actors", "hosts", "run_dir", "resume", "allow_unconfined")
"""optimize's flags that mean something with --resume (where the run goes on, and where it is); the others are the
run's own settings, kept from its start"""


def _ignored_with_resume(ctx: typer.Context) -> list[str]:
    """The run-setting flags given on the command line beside --resume: the resumed run keeps its own settings."""
    def given(name: str) -> bool:  # by the enum's name: typer may carry a click of its own
        source = ctx.get_parameter_source(name)
        return getattr(source, "name", None) == "COMMANDLINE"

    return [f"--{name.replace('_', '-')}" if name != "problem" else "PROBLEM" for name in ctx.params
            if name not in RESUME_KEEPS and given(name)]


@app.command("optimize")
@run_settings("optimize")
def optimize_cmd(
    ctx: typer.Context,
    problem: Annotated[Optional[Path], typer.Argument(help="problem file (KernelBench format); omit with --resume")] = None,
    seed_kernel: SeedKernelOpt = None,
    run_dir: RunDirOpt = Path("runs"),
    resume: Annotated[Optional[str], typer.Option("--resume", help="continue the run with this id")] = None,
    given: Given = None,  # type: ignore[assignment]  # the run settings' flags (`run_settings`)
    allow_unconfined: AllowUnconfinedOpt = False,
) -> None:
    """Improve a kernel step by step: analyst, strategist, coder, verifier, archive. Status at the end: finished,
    stopped (Ctrl-C or a stop request: resumable) or failed (exit 1; resumable when the model provider was down)."""
    from kernelwright import optimize_command as opt

    # with --resume the run's own place decides (a Ray cluster's or here): the API checks it when it reopens it
    _confinement(allow_unconfined, here=not given["cluster"] and not resume)
    ignored = _ignored_with_resume(ctx) if resume else []
    if ignored:
        err.print(f"ignored with --resume: {', '.join(ignored)} (a resumed run keeps the settings it was started "
                  "with; only --device, --cluster, --actors, --hosts and --run-dir apply)", markup=False, highlight=False)
    try:
        summary = opt.run_optimize(
            problem=problem, seed_kernel=seed_kernel, run_dir=run_dir, resume=resume, console=out,
            config=None if resume else _config_for(problem, seed_kernel, given),
            device=given["device"], cluster=given["cluster"], actors=given["actors"], hosts=given["hosts"])
    except opt.UsageError as e:
        raise _usage_error(e) from None
    for line in opt.end_lines(summary, run_dir):
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    out.print(_look_at(summary.run_id, run_dir), markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(summary.exit_code)


def _config_for(problem: Path | None, seed_kernel: Path | None, given: Given) -> RunConfig | None:
    """A new run's settings, once its files are there: the problem first (without it no seed matters), then the
    seed, then the flags (None without a problem: the command says what is missing)."""
    from kernelwright import api

    if problem is None:
        return None
    if not problem.is_file():
        raise api.UsageError(f"{problem}: no such problem file")
    if seed_kernel is not None and not seed_kernel.is_file():
        raise api.UsageError(f"{seed_kernel}: no such seed kernel file")
    return given.config()


def _look_at(run_id: str, run_dir: Path) -> str:
    """The last line of a run: the commands that show it (a new user's next step after the demo)."""
    where = "" if Path(run_dir) == Path("runs") else f" --run-dir {run_dir}"
    return f"look at it: kernelwright trace {run_id}{where}; kernelwright report {run_id}{where}"


@app.command("chat")
@run_settings("chat")
def chat_cmd(
    problem: Annotated[Optional[Path], typer.Argument(help="problem file (KernelBench format); omit with --attach")] = None,
    attach: Annotated[Optional[str], typer.Option("--attach", help="review (or resume and drive) the run with this id")] = None,
    seed_kernel: SeedKernelOpt = None,
    run_dir: RunDirOpt = Path("runs"),
    resume: Annotated[Optional[str], typer.Option("--resume", help="continue the run with this id (the same as "
                                                                   "--attach)")] = None,
    given: Given = None,  # type: ignore[assignment]  # the run settings' flags (`run_settings`), as optimize takes them
    allow_unconfined: AllowUnconfinedOpt = False,
) -> None:
    """A chat session over a run: review each proposal (approve, edit, reject, propose your own), steer, ask why.
    Takes optimize's flags (a new run's reviews: proposals by default, each branch waiting for you; with --review
    none it goes on unattended, /status, /why and /steer still work); --resume is --attach."""
    from kernelwright import api
    from kernelwright import chat as chat_mod

    if resume is not None and attach is not None and resume != attach:
        raise _usage_error(f"--attach {attach} and --resume {resume} name two runs: give one")
    attach = attach or resume
    if (problem is None) == (attach is None):
        raise _usage_error("give a problem file to start a run, or --attach RUN_ID (not both)")
    _confinement(allow_unconfined, here=attach is None and not given["cluster"])  # attached: the API checks on resume

    def start() -> api.RunHandle:
        config = _config_for(problem, seed_kernel, given)
        return api.start_run(problem, seed_kernel=seed_kernel, config=config, runs_dir=run_dir)  # type: ignore[arg-type]

    try:
        moves = {name: given[name] for name in ("device", "cluster", "actors", "hosts")}
        code = chat_mod.run_chat(attach=attach, runs_dir=run_dir, console=out, start=start,
                                 asker_for=chat_mod.asker_for, moves={k: v for k, v in moves.items() if v is not None})
    except api.UsageError as e:
        raise _usage_error(e) from None
    raise typer.Exit(code)


@app.command("handoff")
def handoff_cmd(
    run_id: Annotated[str, typer.Argument(help="the run's id (see kernelwright runs)")],
    out_dir: Annotated[Path, typer.Option("--out", help="the folder to write (new, or empty)")],
    kernel: Annotated[Optional[str], typer.Option("--kernel", help="a kernel's hash, or a unique prefix of it "
                                                                   "(default: the run's best kernel)")] = None,
    force: Annotated[bool, typer.Option("--force", help="write a kernel that failed verification or was never "
                                                        "verified (the README says so)")] = False,
    run_dir: RunDirOpt = Path("runs"),
) -> None:
    """Write a kernel of a run for review: a standalone module, its pytest against the problem's reference on
    several input families and shapes, a benchmark script and a README with the measured numbers."""
    from kernelwright import api
    from kernelwright.handoff import write_handoff

    try:
        made = write_handoff(run_id, out_dir, kernel=kernel, force=force, runs_dir=run_dir)
    except api.UsageError as e:
        raise _usage_error(e) from None
    shapes = ", ".join(s.name for s in made.shapes)
    out.print(f"hand-off of kernel {made.kernel} ({made.verdict}) in {made.path}: {made.name}.py, "
              f"test_{made.name}.py (shapes: {shapes}), bench_{made.name}.py, README.md", markup=False,
              highlight=False, soft_wrap=True)
    out.print(f"check it: cd {made.path} && python -m pytest -q", markup=False, highlight=False, soft_wrap=True)


@app.command("mcp")
def mcp_cmd(
    transport: Annotated[TransportOpt, typer.Option(help="stdio (a chat client starts the server) or http "
                                                         "(streamable HTTP at http://HOST:PORT/mcp)")] = TransportOpt.stdio,
    host: Annotated[str, typer.Option(help="http: the address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="http: the port to listen on")] = 8765,
    run_dir: RunDirOpt = Path("runs"),
    allow_unconfined: AllowUnconfinedOpt = False,
) -> None:
    """Serve kernelwright to MCP clients (Claude Code, Cursor, ...): start, review, steer and read runs."""
    _confinement(allow_unconfined, here=False)  # each tool that runs candidates checks when it is called
    try:
        from kernelwright import mcp_server
    except ImportError as e:
        raise _usage_error(f"the MCP server needs the mcp package ({e}); pip install 'mcp>=2'") from None
    mcp_server.serve(transport.value, run_dir, host, port)


@app.command("runs")
def runs_cmd(run_dir: Annotated[Path, typer.Option("--run-dir", help="folder of run directories")] = Path("runs")) -> None:
    """List runs: id, problem, status, steps, best speedup."""
    from kernelwright.tools.runstore import RunStore

    if run_dir == Path("runs") and not run_dir.exists():  # the default, before a first run: nothing mistyped
        sys.stdout.write("no runs yet here (./runs): start one with kernelwright optimize PROBLEM\n")
        return
    _runs_folder(run_dir)

    from kernelwright.optimize_command import runs_lines

    from kernelwright.tools.review_desk import ReviewDesk

    store = RunStore(run_dir)
    infos = store.list()
    # a run left "running" by a driver that was killed (SIGKILL, the OOM killer) says so: it can be resumed
    gone = {i.id for i in infos if i.status == "running" and ReviewDesk(store.open(i.id)).driver_gone()}
    # plain columns, the id never cut (every other command needs it); in a terminal only the problem's path is
    # shortened to fit the width, piped nothing is
    for line in runs_lines(infos, out.width if out.is_terminal else None, gone):
        sys.stdout.write(line + "\n")


def _runs_folder(run_dir: Path) -> None:
    """A folder of runs that is not there is a mistyped --run-dir, not an empty list: one sentence, exit 2."""
    if not run_dir.is_dir():
        raise _usage_error(f"{run_dir}: no such folder of runs")


@app.command("trace")
def trace_cmd(
    run_id: Annotated[Optional[str], typer.Argument(help="the run's id (see kernelwright runs)")] = None,
    step: Annotated[Optional[int], typer.Option(help="only this step")] = None,
    schema: Annotated[bool, typer.Option("--schema", help="print the step record's JSON schema (docs/trace.md)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line, one line per step")] = False,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing steps as they land, until the run ends")] = False,
    run_dir: Annotated[Path, typer.Option("--run-dir", help="folder of run directories")] = Path("runs"),
) -> None:
    """Print a run's step records: diagnosis, proposal, diff, verdict, archive decision."""
    import time

    from kernelwright import api

    if schema:
        sys.stdout.write(json.dumps(api.StepRecord.model_json_schema(), indent=1) + "\n")
        return
    if run_id is None:
        raise _fail("give a run id (see kernelwright runs), or --schema", as_json)
    try:
        view = api.open_run(run_id, run_dir)
    except api.UsageError as e:
        raise _fail(e, as_json) from None
    shown = 0
    idle_since: float | None = None
    try:
        while True:
            try:
                new = view.steps(shown)  # only what landed since the last look is read and validated
            except api.UsageError as e:
                raise _fail(e, as_json) from None
            for r in new:
                if step is None or r.step == step:
                    _print_step(r, as_json)
            shown += len(new)
            if not follow:
                if step is not None and not any(r.step == step for r in new):
                    numbers = sorted({r.step for r in new})
                    there = (f"steps {numbers[0]} to {numbers[-1]}" if len(numbers) > 1 else f"step {numbers[0]}"
                             ) if numbers else "no steps yet"
                    raise _fail(f"run {run_id} has no step {step}: it has {there}", as_json)
                return
            info = view.info()
            if info.status in ("finished", "stopped", "failed", "interrupted"):
                if not as_json:
                    from kernelwright.optimize_command import resume_command

                    err.print(f"run {run_id}: {info.status}" + (f" ({info.stop_reason})" if info.stop_reason else "")
                              + (f"; resume: {resume_command(run_id, run_dir)}" if info.resumable else ""),
                              markup=False, highlight=False)
                return
            # a run marked running that no live process drives (killed): say so once it has been quiet a while
            if api.driven_elsewhere(run_id, run_dir):
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > 10:
                if not as_json:
                    err.print(f"run {run_id}: no process is driving it now (resume it: kernelwright optimize "
                              f"--resume {run_id})", markup=False, highlight=False)
                return
            time.sleep(0.5)
    except KeyboardInterrupt:
        return


def _print_step(r, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    if as_json:
        sys.stdout.write(r.model_dump_json() + "\n")
        sys.stdout.flush()
        return
    from kernelwright.optimize_command import verdict_words

    out.print(f"[bold]step {r.step}[/] ({r.step_id}) parent {r.parent} -> " + (f"child {r.child}" if r.child else "no child"))
    if r.diagnosis:
        out.print(f"  diagnosis: {r.diagnosis.bottleneck}: {r.diagnosis.summary}", markup=False)
        if r.diagnosis.evidence:
            out.print(f"  evidence: {'; '.join(r.diagnosis.evidence)}", markup=False)
    p = r.proposal
    out.print(f"  proposal: {p.what} (predicted {p.predicted_speedup}x): {p.why}" if p else "  proposal: -",
              markup=False)
    if r.review:
        why = f": {r.review.message}" if r.review.message else ""
        out.print(f"  review: {r.review.decision} by {r.review.by} at {r.review.at}{why}", markup=False)
    out.print(f"  verifier: {verdict_words(r)}", markup=False)
    if r.tuning:
        out.print(f"  tuning: {r.tuning.words()}" + (f" (untuned child {r.tuning.from_})" if r.tuning.chose else ""),
                  markup=False)
    if r.confirmation:
        c = r.confirmation
        out.print("  confirmed with fresh draws" if c.verdict == "pass" else
                  f"  a second judgement with fresh draws: {c.verdict} ({c.reason})", markup=False)
    d = r.decision
    measured = f"measured {d.measured_speedup:.3f}x" if d.measured_speedup is not None else "not timed"
    predicted = f", predicted {d.predicted_speedup}x" if d.predicted_speedup is not None else ""
    out.print(f"  archive: {d.decision} ({measured}{predicted}): {d.why}", markup=False)
    if r.coder.diff:
        out.print(r.coder.diff.rstrip(), markup=False, highlight=False)


@app.command("export")
def export_cmd(
    run_ids: Annotated[Optional[list[str]], typer.Argument(help="the runs' ids (see kernelwright runs)", show_default=False)] = None,
    fmt: Annotated[str, typer.Option("--format", help="steps (whole step tuples), sft (chat examples) or rl (prompt and reward)")] = "steps",
    min_gain: Annotated[Optional[str], typer.Option("--min-gain", help="keep only verified steps, not suspect, faster beyond the noise band and by at least this fraction (0.05 = 5 %)")] = None,
    out_file: Annotated[Optional[Path], typer.Option("--out", help="write the JSON lines to this file, atomically (default: stdout)")] = None,
    schema: Annotated[bool, typer.Option("--schema", help="print the JSON schema of --format's records (docs/export.md)")] = False,
    run_dir: Annotated[Path, typer.Option("--run-dir", help="folder of run directories")] = Path("runs"),
) -> None:
    """Write runs' steps as JSON lines, for training data: step tuples, SFT chat examples or RL tasks (docs/export.md)."""
    from kernelwright import export
    from kernelwright.api import UsageError

    try:
        form = export.parse_format(fmt)
        if schema:
            sys.stdout.write(json.dumps(export.json_schema(form), indent=1) + "\n")
            return
        if not run_ids:
            raise UsageError("give one or more run ids (see kernelwright runs), or --schema")
        gain = export.parse_min_gain(min_gain) if min_gain is not None else None
        if out_file is not None and out_file.is_dir():
            raise UsageError(f"--out {out_file} is a folder: give a file name")
        runs = export.open_runs(run_ids, run_dir)
        records = export.export_records(runs, form, gain)
        if out_file is None:
            n = 0
            for rec in records:
                sys.stdout.write(rec.model_dump_json() + "\n")
                n += 1
        else:
            n = export.write_jsonl(records, out_file)
    except UsageError as e:
        raise _usage_error(e) from None
    except OSError as e:
        raise _usage_error(f"cannot write to {out_file or 'stdout'}: {e.strerror or e}") from None
    total = sum(len(steps) for _, steps in runs)
    err.print(f"export: {n} of {total} steps as {form}" + (f" to {out_file}" if out_file else ""),
              markup=False, highlight=False, soft_wrap=True)


@app.command("bench")
@run_settings("optimize", only=("model", "base_url", "role_models", "branches", "profile", "trials", "cluster",
                                "actors", "hosts"))
def bench_cmd(
    suite: Annotated[Path, typer.Argument(help="a suite in KernelBench's layout (level1/23_Softmax.py, ...)")],
    kernels: Annotated[Optional[Path], typer.Option("--kernels", help="judge these kernels, laid out like the suite")] = None,
    optimize: Annotated[bool, typer.Option("--optimize", help="run the loop on each problem instead")] = False,
    seed_kernels: Annotated[Optional[Path], typer.Option("--seed-kernels", help="with --optimize: seeds laid out like the suite")] = None,
    iterations: Annotated[int, typer.Option(min=1, help="with --optimize: children to evaluate per problem")] = DEFAULT_ITERATIONS,
    budget_per_problem: Annotated[Optional[str], typer.Option("--budget-per-problem", help="with --optimize: wall time per problem, e.g. 10m")] = None,
    levels: Annotated[Optional[str], typer.Option("--levels", help="levels to run, e.g. 1,2")] = None,
    problems: Annotated[Optional[str], typer.Option("--problems", help="only problems matching these globs (comma-separated)")] = None,
    device: Annotated[Optional[str], typer.Option(help="cpu, cuda, cuda:N, or cuda:0,cuda:1 (one problem per GPU at a time)")] = None,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="results folder (default: runs/bench-<time>)")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="continue the results in --out, judging only what is missing")] = False,
    compile_mode: Annotated[CompileMode, typer.Option(help="torch.compile mode of the compiled baseline")] = CompileMode.default,
    given: Given = None,  # type: ignore[assignment]  # the run settings' flags bench takes (`run_settings`)
    allow_unconfined: AllowUnconfinedOpt = False,
) -> None:
    """A KernelBench-style benchmark: judge a folder of kernels (--kernels) or run the loop on each problem
    (--optimize) over a suite; per-problem verdicts and times, fast_p against eager and torch.compile. The model,
    role, branch and profile flags apply with --optimize."""
    cluster, actors, hosts, trials = given["cluster"], given["actors"], given["hosts"], given["trials"]
    import time

    _confinement(allow_unconfined, here=not cluster)

    from kernelwright import api
    from kernelwright.bench_command import Summary, figures_markdown, run_bench

    try:
        wanted = [int(x) for x in levels.split(",") if x.strip()] if levels else None
    except ValueError:
        raise _usage_error(f"--levels takes numbers separated by commas, e.g. 1,2, not {levels!r}") from None
    out_dir = out_dir or Path("runs") / f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        config = None
        if optimize:
            window = _duration("--budget-per-problem")(budget_per_problem) if budget_per_problem else None
            config = Given(given.door, {k: v for k, v in given.values.items()
                                        if k not in ("cluster", "actors", "hosts")}).config(
                iterations=iterations, time_budget_s=window)
            api.check_config(config)
        elif seed_kernels is not None:
            raise api.UsageError("--seed-kernels goes with --optimize")
        for row in run_bench(suite, out_dir, kernels=kernels, optimize_config=config, seed_kernels=seed_kernels,
                             levels=wanted, pattern=problems, device=device, resume=resume, trials=trials,
                             compile_mode=_mode(compile_mode), cluster=cluster, actors=actors,
                             hosts=hosts or "auto"):
            sp = (f"{row.speedup_vs_eager:.2f}× eager, " if row.speedup_vs_eager is not None else "") + (
                f"{row.speedup_vs_compile:.2f}× torch.compile" if row.speedup_vs_compile is not None else "")
            out.print(f"{row.problem}: {row.verdict} ({row.reason}){' ' + sp if sp else ''}"
                      + (f" [run {row.run}]" if row.run else ""), markup=False, highlight=False)
        summary = Summary.model_validate_json((out_dir / "summary.json").read_text())
    except api.UsageError as e:
        raise _usage_error(e) from None
    except OSError as e:
        raise _usage_error(f"cannot write to {out_dir}: {e.strerror or e}") from None
    out.print(figures_markdown(summary), markup=False, highlight=False)
    out.print(f"results: {out_dir}/results.jsonl, summary: {out_dir}/summary.md, {out_dir}/summary.html",
              markup=False, highlight=False)


@app.command("report")
def report_cmd(
    run_id: Annotated[str, typer.Argument(help="the run's id (see kernelwright runs)")],
    out_file: Annotated[Optional[Path], typer.Option("--out", help="the HTML file (default: runs/<id>/report.html)")] = None,
    run_dir: Annotated[Path, typer.Option("--run-dir", help="folder of run directories")] = Path("runs"),
) -> None:
    """Write a run as one self-contained HTML page (no network): header, speedup over steps, lineage, step cards."""
    from kernelwright import api
    from kernelwright.report import write_report

    try:
        view = api.open_run(run_id, run_dir)
        path = write_report(view.run, out_file)
    except api.UsageError as e:
        raise _usage_error(e) from None
    except OSError as e:
        where = out_file or Path(run_dir) / run_id / "report.html"
        raise _usage_error(f"cannot write the report to {where}: {e.strerror or e}") from None
    out.print(f"report: {path}", markup=False, highlight=False)


knowledge_app = typer.Typer(
    help="What earlier runs learned on this machine: their winning steps (symptom -> move -> measured effect, GPU, "
         "problem kind, run and step), shown to later runs' strategists. list, show ID, export [FILE], import FILE, "
         "learn RUN..., clear.",
    no_args_is_help=True)
app.add_typer(knowledge_app, name="knowledge")
StoreOpt = Annotated[Optional[Path], typer.Option(
    "--knowledge", metavar="PATH", help="the knowledge store's file (default: $XDG_DATA_HOME/kernelwright/"
                                        "knowledge.jsonl, as optimize uses)")]


def _store(path: Optional[Path]):  # type: ignore[no-untyped-def]
    """The knowledge store at `path` (default: the user's); a folder is a usage error. Lines it cannot read are
    said on stderr, once."""
    from kernelwright.tools.knowledge import KnowledgeStore

    if path is not None and path.expanduser().is_dir():
        raise _usage_error(f"--knowledge {path} is a folder: give the knowledge store's file")
    return KnowledgeStore(path)


def _skipped(store) -> None:  # type: ignore[no-untyped-def]
    if store.skipped:
        err.print(f"warning: {store.skipped} line(s) of {store.path} could not be read and were skipped",
                  markup=False, highlight=False, soft_wrap=True)


@knowledge_app.command("list")
def knowledge_list_cmd(knowledge: StoreOpt = None,
                       as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line, one line per entry")] = False) -> None:
    """List the entries: id, date, problem and kind, GPU, the move and what it gained."""
    store = _store(knowledge)
    entries = store.entries()
    _skipped(store)
    if as_json:
        for e in entries:
            sys.stdout.write(e.model_dump_json() + "\n")
        return
    if not entries:
        sys.stdout.write(f"the knowledge store ({store.path}) is empty: runs add their winning steps to it\n")
        return
    for e in entries:
        sys.stdout.write(f"{e.id}  {e.date}  {e.problem} ({','.join(e.kinds) or '?'})  {e.gpu}  "
                         f"{e.category} {e.key}  {e.speedup:.3f}x (noise ±{e.noise_band:.1%})\n")


@knowledge_app.command("show")
def knowledge_show_cmd(entry_id: Annotated[str, typer.Argument(help="an entry's id (run/step), or a unique prefix of it")],
                       knowledge: StoreOpt = None,
                       as_json: Annotated[bool, typer.Option("--json", help="the entry as one JSON object")] = False) -> None:
    """Show one entry in full: its provenance, symptom and evidence, the move and its measured effect."""
    store = _store(knowledge)
    e = store.find(entry_id)
    _skipped(store)
    if e is None:
        n = len(store.matching(entry_id))
        raise _fail(f"{entry_id} names {n} entries of the knowledge store ({store.path}): give more of the id" if n
                    else f"no entry {entry_id} in the knowledge store ({store.path}): see kernelwright knowledge list",
                    as_json)
    if as_json:
        sys.stdout.write(e.model_dump_json() + "\n")
        return
    from kernelwright.agents.playbook import render_learned

    lines = [f"{e.id}: {e.problem} ({', '.join(e.kinds) or 'kind unknown'}), recorded {e.date}",
             render_learned(e).removeprefix("- "),
             f"symptom: {e.bottleneck}-bound", *[f"  evidence: {x}" for x in e.evidence],
             f"move: {e.category} {e.key}" + (f": {e.what}" if e.what else ""),
             f"measured on {e.gpu}" + (" (" + ", ".join(f"{k} {v}" for k, v in e.versions.items()) + ")"
                                       if e.versions else "") + f", proposed by {e.policy or 'unknown'}"]
    for line in lines:
        sys.stdout.write(line + "\n")


@knowledge_app.command("export")
def knowledge_export_cmd(
    out_file: Annotated[Optional[Path], typer.Argument(help="the file to write, atomically (default: stdout)")] = None,
    knowledge: StoreOpt = None,
) -> None:
    """Write every entry as JSON lines, to FILE or to stdout."""
    store = _store(knowledge)
    if out_file is not None and out_file.is_dir():
        raise _usage_error(f"{out_file} is a folder: give a file name")
    try:
        if out_file is None:
            lines = store.export_lines()
            for line in lines:
                sys.stdout.write(line + "\n")
            n = len(lines)
        else:
            n = store.export(out_file)
    except OSError as e:
        raise _usage_error(f"cannot write to {out_file or 'stdout'}: {e.strerror or e}") from None
    _skipped(store)
    err.print(f"export: {n} entries of {store.path}" + (f" to {out_file}" if out_file else ""), markup=False,
              highlight=False, soft_wrap=True)


@knowledge_app.command("import")
def knowledge_import_cmd(
    in_file: Annotated[Path, typer.Argument(help="JSON lines as `knowledge export` writes them (another machine's store)")],
    knowledge: StoreOpt = None,
) -> None:
    """Add another store's entries (a file `export` wrote) that this one does not hold yet, by id."""
    store = _store(knowledge)
    if in_file.is_dir():
        raise _usage_error(f"{in_file} is a folder: give the file `kernelwright knowledge export` wrote")
    try:
        text = in_file.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise _usage_error(f"cannot read {in_file}: {e.strerror or e}") from None
    try:
        added, already, bad = store.import_lines(text)
    except OSError as e:
        raise _usage_error(f"cannot write to {store.path}: {e.strerror or e}") from None
    if bad and not added and not already:
        raise _usage_error(f"{in_file} holds no knowledge entry (line {bad[0]} is not one): nothing was imported")
    sys.stdout.write(f"imported {added} entries from {in_file} into {store.path}"
                     + (f"; {already} were there already" if already else "")
                     + (f"; {len(bad)} line(s) are not entries and were skipped (first: line {bad[0]})" if bad else "")
                     + "\n")


def _learn_source(given: str, run_dir: Path):  # type: ignore[no-untyped-def]
    """The run RUN names: a run's folder (it holds run.json), else a run id in `run_dir`; one sentence otherwise."""
    from kernelwright.tools.runstore import Run, RunError, RunStore

    path = Path(given).expanduser()
    if path.is_dir():
        if not (path / "run.json").is_file():
            raise _usage_error(f"{given} is not a run's folder (it has no run.json): give a folder under runs/ or "
                               "a run id")
        return Run(path)
    if path.exists():
        raise _usage_error(f"{given} is a file, not a run's folder: give a folder under runs/ or a run id")
    try:
        return RunStore(run_dir).open(given)
    except RunError as e:
        raise _usage_error(f"{e}: give a run's folder or a run id") from None


@knowledge_app.command("learn")
def knowledge_learn_cmd(
    runs: Annotated[list[str], typer.Argument(metavar="RUN", help=(
        "a finished or stopped run: its folder, or its id in --run-dir"))],
    knowledge: StoreOpt = None,
    run_dir: Annotated[Path, typer.Option("--run-dir", help="folder of run directories")] = Path("runs"),
) -> None:
    """Add the winning steps of runs' records to the store, as the runs would have (a run on a GPU host given back,
    or made with --no-knowledge, kept none); ids the store holds are skipped."""
    from kernelwright.agents.playbook import learn
    from kernelwright.tools.runstore import RunError

    store = _store(knowledge)
    found = [(given, _learn_source(given, run_dir)) for given in runs]
    for given, run in found:  # every run is checked before any is learned from
        if not run.trace():
            raise _usage_error(f"{given} has no step records (its trace.jsonl is missing or empty): nothing to learn")
    for given, run in found:
        try:
            got = learn(run, store)
        except RunError as e:
            raise _usage_error(e) from None
        except OSError as e:
            raise _usage_error(f"cannot learn from {given}: {e.strerror or e}"
                               + (f" ({e.filename})" if e.filename else "")) from None
        sys.stdout.write(f"learned {len(got.added)} entries from {given} ({got.already} already held; "
                         f"{got.not_won} steps did not win"
                         + (f"; {got.unreadable} step records could not be read" if got.unreadable else "") + ")\n")
    _skipped(store)


@knowledge_app.command("clear")
def knowledge_clear_cmd(knowledge: StoreOpt = None,
                        yes: Annotated[bool, typer.Option("--yes", help="clear without asking")] = False) -> None:
    """Remove every entry (later runs start with the shipped playbook alone)."""
    store = _store(knowledge)
    n = len(store.entries())
    if n == 0 and not store.skipped:
        sys.stdout.write(f"the knowledge store ({store.path}) is empty already\n")
        return
    if not yes:
        if not sys.stdin.isatty():
            raise _usage_error(f"clearing removes {n} entries from {store.path}: add --yes (nothing was cleared)")
        if not typer.confirm(f"remove {n} entries from {store.path}?"):
            raise _usage_error("nothing was cleared")
    try:
        store.clear()
    except OSError as e:
        raise _usage_error(f"cannot clear {store.path}: {e.strerror or e}") from None
    sys.stdout.write(f"cleared {n} entries from {store.path}\n")


def _fail(message: str | BaseException, as_json: bool, reason: str = "usage_error") -> typer.Exit:
    if as_json:
        _json_error(spoken(message, flag) if isinstance(message, BaseException) else message, reason)
        return typer.Exit(2)
    return _usage_error(message)


def _read_candidate(candidate: Path, as_json: bool) -> str:
    if not candidate.is_file():
        raise _fail(f"{candidate}: no such candidate file", as_json)
    try:
        return candidate.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise _fail(f"{candidate}: cannot be read ({e})", as_json) from None


def _mode(mode: CompileMode) -> str | None:
    return None if mode is CompileMode.none else mode.value


def _evaluate(problem: Path, candidate: Path, device: str | None, precision: PrecisionOpt | None, trials: int,
              compile_mode: CompileMode, as_json: bool, allow_unconfined: bool):  # type: ignore[no-untyped-def]
    from kernelwright.evaluators import DeviceError, EvalPolicy, Evaluator, ProblemError, load_problem, resolve_device

    source = _read_candidate(candidate, as_json)
    try:
        dev = resolve_device(device)
        prob = load_problem(problem, precision.value if precision else None)
        policy = EvalPolicy(trials=trials, compile_mode=_mode(compile_mode), allow_unconfined=allow_unconfined)
        with Evaluator(prob, str(dev), policy) as evaluator:
            return evaluator.evaluate(source), prob
    except ProblemError as e:
        raise _fail(e, as_json, "bad_problem") from None
    except DeviceError as e:
        raise _fail(e, as_json) from None
    except Exception as e:  # noqa: BLE001 - the judge failed: one sentence (one JSON object), never a traceback
        what = "ran out of memory" if "out of memory" in str(e).lower() else f"failed: {type(e).__name__}: {str(e)[:300]}"
        raise _fail(f"the evaluator itself {what}", as_json, "evaluator_error") from None


def _print_result(result, problem: str, candidate: str, verbose: bool = False) -> None:  # type: ignore[no-untyped-def]
    colour = "green" if result.passed else "red"
    out.print(f"[bold {colour}]{result.verdict.upper()}[/] [dim]{result.reason}[/]  {escape(candidate)} on {escape(problem)} "
              f"({result.device}, {result.precision})")
    if result.detail:
        out.print(result.detail, markup=False, highlight=False)
    if result.rule:
        out.print(f"rule: {result.rule}")
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("check")
    table.add_column("outcome")
    table.add_column("detail", overflow="fold")
    for c in result.checks:
        style = {"pass": "green", "fail": "red", "skip": "yellow", "info": "cyan"}[c.outcome]
        table.add_row(c.name, f"[{style}]{c.outcome}[/]", escape(c.detail))
    out.print(table)
    for flag in result.problem_flags:
        out.print(f"[yellow]problem flag:[/] {escape(flag)}")
    t = result.timing
    if t is None:
        out.print(f"[dim]timing: unavailable ({escape(str(result.timing_unavailable))})[/]")
    else:
        line = (f"time {t.median_ms:.4g} ms (p25 {t.p25_ms:.4g} – p75 {t.p75_ms:.4g}, {t.reps} reps); "
                f"eager {t.eager_ms:.4g} ms → {t.speedup_vs_eager:.2f}× ({t.vs_eager})")
        if t.compile_ms and t.speedup_vs_compile:
            line += f"; torch.compile {t.compile_ms:.4g} ms → {t.speedup_vs_compile:.2f}× ({t.vs_compile})"
        out.print(line + f"; noise band ±{t.noise_band:.1%}", markup=False, highlight=False)
        if t.floor_ms and t.fraction_of_floor is not None:
            out.print(f"roofline floor {t.floor_ms:.4g} ms ({t.bound}-bound): {t.fraction_of_floor:.0%} of the floor",
                      markup=False, highlight=False)
        for flag in t.suspect:
            out.print(f"[bold yellow]suspect:[/] {escape(flag)}")
    if verbose or _VERBOSE:  # where the evaluation's time went: for whoever asked (eval -v, kernelwright -v eval)
        phases = ", ".join(f"{k} {v:.2f}" for k, v in result.phases.items())
        out.print(f"[dim]phases (s): {phases}[/]")


def main() -> None:
    try:
        if "--json" not in sys.argv[1:]:
            app()
            return
        # --json: exactly one JSON object on stdout, also when the option parser rejects the command line.
        try:
            code = app(standalone_mode=False)
        except _ParseError as e:
            _json_error(e.format_message())
            sys.exit(e.exit_code)
        sys.exit(code if isinstance(code, int) else 0)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
