"""Run settings are defined once (issue 25, item 1): every front door (`kernelwright optimize`, `kernelwright chat`,
the MCP server's start_run, the served graph) starts a run given no settings with RunConfig's defaults, apart from
the documented exceptions (`context.FRONT_DOOR_DEFAULTS`), and turns the same bad setting down with the same
sentence, in the settings' own words (no CLI flag an MCP or Studio user cannot type)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from kernelwright import api, cli
from kernelwright.agents import context
from kernelwright.agents.context import RunConfig

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"

CLI_NAMES = {"model": "model", "base_url": "base_url", "iterations": "iterations", "branches": "branches",
             "precision": "precision", "trials": "trials", "profile": "profile", "review": "review",
             "compile_mode": "compile_mode"}
"""the CLI options that name a RunConfig field one to one (the others, None by default, leave it to RunConfig)"""

RESOLVED = {"device", "actors"}
"""settled when the run is created (the machine's devices, the cluster's actors): not a default to compare"""


class Captured(Exception):
    """Raised by the stand-in for api.start_run once it has the config a front door built."""


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[RunConfig]:
    """api.start_run replaced: it keeps the config and stops there (nothing is created, nothing runs)."""
    seen: list[RunConfig] = []

    def start_run(problem: Any, *, config: RunConfig | None = None, **_: Any) -> Any:
        seen.append(config or RunConfig())
        raise api.UsageError("captured")

    monkeypatch.setattr(api, "start_run", start_run)
    monkeypatch.setenv("KERNELWRIGHT_ALLOW_UNCONFINED", "1")
    return seen


def expected(door: str) -> dict[str, Any]:
    """RunConfig's defaults with the door's documented exceptions over them."""
    want = RunConfig().as_dict()
    want.update(context.FRONT_DOOR_DEFAULTS[door].values)
    return want


def same(config: RunConfig, door: str) -> None:
    got, want = config.as_dict(), expected(door)
    diff = {k: (got[k], want[k]) for k in want if k not in RESOLVED and got[k] != want[k]}
    assert not diff, f"{door}: (given, RunConfig's) {diff}"


def _cli_defaults(command: str) -> dict[str, Any]:
    click = get_command(cli.app).commands[command]  # type: ignore[attr-defined]
    out = {}
    for p in click.params:
        d = p.default
        out[p.name] = d.value if hasattr(d, "value") else d
    return out


@pytest.mark.parametrize("command", ["optimize", "chat"])
def test_the_cli_options_default_to_runconfigs(command: str, captured: list[RunConfig]) -> None:
    declared = _cli_defaults(command)
    want = expected(command)
    offered = {name: field for name, field in CLI_NAMES.items() if name in declared}
    assert len(offered) >= len(CLI_NAMES) - 1  # chat leaves compile_mode out
    for name, field in offered.items():
        assert declared[name] == want[field], f"{command} --{name}: {declared[name]!r}, RunConfig {want[field]!r}"
    assert declared["no_knowledge"] is (not want["use_knowledge"])
    # what the command builds from no settings at all (None-valued options leave the field to RunConfig)
    r = CliRunner().invoke(cli.app, [command, str(PROBLEM), "--seed-kernel", str(SEED)])
    assert r.exit_code == 2 and "captured" in r.output, r.output
    same(captured[-1], command)


def test_the_mcp_tools_default_to_runconfigs(tmp_path: Path, captured: list[RunConfig]) -> None:
    pytest.importorskip("mcp")
    from kernelwright import mcp_server

    with pytest.raises(api.UsageError, match="captured"):
        mcp_server.Server(tmp_path).start_run(str(PROBLEM), str(SEED))
    same(captured[-1], "mcp")
    # the tool's own parameters, as a client reads them in its input schema
    app = mcp_server.build(tmp_path)
    tools = {t.name: t for t in asyncio.run(app.list_tools())}
    props = tools["start_run"].input_schema["properties"]
    want = expected("mcp")
    for name in ("model", "iterations", "branches", "review"):
        assert props[name].get("default") == want[name], (name, props[name], want[name])
    assert props["branches"].get("minimum") == context.RANGES["branches"][0]
    assert props["branches"].get("maximum") == context.RANGES["branches"][1]
    assert tools["evaluate"].input_schema["properties"]["trials"].get("default") == RunConfig().trials


def test_the_served_graph_defaults_to_runconfigs() -> None:
    from kernelwright.graphs import serve

    same(serve._settings({"problem": str(PROBLEM)}), "serve")


def test_every_exception_says_why_and_names_real_settings() -> None:
    names = {f.name for f in dataclasses.fields(RunConfig)}
    assert set(context.FRONT_DOOR_DEFAULTS) <= {"optimize", "chat", "mcp", "serve"}
    for door, exc in context.FRONT_DOOR_DEFAULTS.items():
        assert set(exc.values) <= names and exc.why.strip(), door
    assert context.default("branches") == RunConfig().branches
    assert context.default("review", "chat") == context.FRONT_DOOR_DEFAULTS["chat"].values.get("review", "none")


def _cli_error(*extra: str) -> str:
    r = CliRunner().invoke(cli.app, ["optimize", str(PROBLEM), "--seed-kernel", str(SEED), "--device", "cpu",
                                     "--allow-unconfined", *extra])
    assert r.exit_code == 2, r.output
    return re.sub(r"^error:\s*", "", r.output.strip())


def _mcp_error(tmp_path: Path, **args: Any) -> str:
    from mcp.server.mcpserver.exceptions import ToolError

    from kernelwright import mcp_server

    app = mcp_server.build(tmp_path)
    with pytest.raises(ToolError) as e:
        asyncio.run(app.call_tool("start_run", {"problem": str(PROBLEM), "seed_kernel": str(SEED), "device": "cpu",
                                                **args}))
    return str(e.value).removeprefix("Error executing tool start_run: ")  # the SDK's framing, not the sentence


def _serve_error(tmp_path: Path, **args: Any) -> str:
    from kernelwright.graphs import serve

    out = serve._start({"problem": str(PROBLEM), "seed_kernel": str(SEED), "device": "cpu",
                        "runs_dir": str(tmp_path / "runs"), **args})  # type: ignore[typeddict-item]
    assert out.get("status") == "failed", out
    return str(out["error"])


@pytest.mark.parametrize("setting,cli_args", [({"actors": 2}, ("--actors", "2")),
                                              ({"branches": 0}, ("--branches", "0")),
                                              ({"model": "gpt-4"}, ("--model", "gpt-4"))])
def test_a_bad_setting_gets_the_same_sentence_in_each_doors_words(
        setting: dict[str, Any], cli_args: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule is written once, in the core, in the settings' own names; the CLI says it with its flags (an MCP or
    Studio user is never told to type --actors), the MCP tool with its parameters' names, the served graph with its
    input's (RunConfig's)."""
    pytest.importorskip("mcp")
    from kernelwright import mcp_server

    monkeypatch.setenv("KERNELWRIGHT_ALLOW_UNCONFINED", "1")
    core = context.settings_problem(RunConfig(**setting))
    assert core is not None
    said = {"cli": _cli_error(*cli_args), "mcp": _mcp_error(tmp_path, **setting), "serve": _serve_error(tmp_path, **setting)}
    assert said == {"cli": core(cli.flag), "mcp": core(mcp_server.parameter), "serve": str(core)}, said
    name = next(iter(setting))
    assert said["cli"].startswith(cli_args[0] + " ") and said["mcp"].startswith(name + " "), said
    assert "--" not in said["mcp"] and "--" not in said["serve"]  # no CLI flag an MCP or Studio user cannot type
    for sentence in said.values():
        assert "\n" not in sentence and "Traceback" not in sentence
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())  # no run was left


BAD_SETTINGS = [dict(review="sometimes"), dict(hosts="maybe"), dict(profile="deep"), dict(compile_mode="fast"),
                dict(branches=0), dict(branches=65), dict(trials=0), dict(iterations=0), dict(actors=2),
                dict(model="gpt-4"), dict(role_models={"critic": "openai:x"}), dict(role_models={"coder": "x"}),
                dict(base_url="http://127.0.0.1:1/v1"), dict(model="openai:x", base_url="ftp://x"),
                dict(token_budget=10), dict(cost_budget_usd=1.0), dict(model="openai:x", cost_budget_usd=1.0),
                dict(knowledge="k.jsonl", use_knowledge=False), dict(knowledge="/")]
"""one bad value for every rule the core checks"""


@pytest.mark.parametrize("setting", BAD_SETTINGS, ids=lambda d: "-".join(f"{k}={v}" for k, v in d.items()))
def test_the_cores_sentences_name_settings_not_flags(setting: dict[str, Any]) -> None:
    """Every sentence the core says about settings speaks their names, never a CLI flag; the CLI's version of the
    same sentence speaks flags only (each setting the sentence names, spelled as the command takes it)."""
    said = context.settings_problem(RunConfig(**setting))
    assert said is not None, setting
    core, at_cli = str(said), said(cli.flag)
    assert "--" not in core and core.split()[0] in {f.name for f in dataclasses.fields(RunConfig)}, core
    assert at_cli.startswith("--") and at_cli != core, at_cli
    named = set(re.findall(r"--[a-z][a-z-]*", at_cli))
    command = get_command(cli.app).commands["optimize"]  # type: ignore[attr-defined]
    offered = {o for p in command.params for o in p.opts}
    assert named <= offered, named - offered  # a flag the sentence names is one optimize takes


def test_the_apis_own_sentences_leave_the_flags_to_the_cli(tmp_path: Path) -> None:
    """api.start_run's refusal of a builtin run without a seed names the seed by its name; the CLI says the flag."""
    with pytest.raises(api.UsageError) as e:
        api.start_run(PROBLEM, runs_dir=tmp_path)
    assert "seed_kernel" in str(e.value) and "--" not in str(e.value)
    assert "--seed-kernel" in context.spoken(e.value, cli.flag)


def test_a_plateau_can_be_switched_off_for_a_soak() -> None:
    """`--plateau-steps 0`: a run that must last its time budget (the soak's GPU half ended on a plateau after 10 of
    its 13 minutes) never stops on a plateau; the flag's default is RunConfig's."""
    import typer

    from kernelwright.agents.archive import Archive, Step
    from kernelwright.agents.stopping import stop_reason
    from kernelwright.agents.context import NEVER, RunConfig, default
    from kernelwright.cli import app, settings_config

    params = {p.name: p for p in typer.main.get_command(app).commands["optimize"].params}
    assert params["plateau_steps"].default == default("plateau_steps") == RunConfig().plateau_steps == 20
    never, usual = settings_config("optimize", {"plateau_steps": 0}), settings_config("optimize", {})
    assert never.plateau() == NEVER and usual.plateau() == 20
    flat = Archive(steps=[Step(step=i, parent_id="s", proposal_key=f"k{i}", child_id=f"c{i}", verdict="pass", reason="ok",
                               why="slower", decision="rejected")
                          for i in range(200)])
    assert stop_reason(flat, plateau_steps=usual.plateau()) == "no improvement in the last 20 steps"
    assert stop_reason(flat, plateau_steps=never.plateau()) is None


def test_chat_takes_every_setting_optimize_takes() -> None:
    """The README says chat takes optimize's flags; it lacked --provider-retry-window, --tune-budget, --compile-mode
    and --plateau-steps, so a reviewed run could not be measured against max-autotune or ride out a long outage."""
    import typer

    from kernelwright.cli import app

    commands = typer.main.get_command(app).commands
    opt = {p.name: p for p in commands["optimize"].params}
    chat = {p.name: p for p in commands["chat"].params}
    missing = sorted(set(opt) - set(chat) - {"resume"} | ({"resume"} - set(chat)))
    assert missing == [], f"optimize options chat lacks: {missing}"
    for name in ("tune_budget", "compile_mode", "plateau_steps", "provider_retry_window"):
        assert chat[name].default == opt[name].default and chat[name].help == opt[name].help, name


SAMPLES: dict[str, tuple[Any, tuple[str, ...], Any, Any]] = {
    # setting: (the field's value, the CLI's words, the MCP parameter's value, the served graph's value)
    "device": ("cpu", ("--device", "cpu"), "cpu", "cpu"),
    "cluster": ("ray://head:10001", ("--cluster", "ray://head:10001"), "ray://head:10001", "ray://head:10001"),
    "actors": (2, ("--actors", "2"), 2, 2),
    "precision": ("bf16", ("--precision", "bf16"), "bf16", "bf16"),
    "branches": (3, ("--branches", "3"), 3, 3),
    "iterations": (4, ("--iterations", "4"), 4, 4),
    "time_budget_s": (90.0, ("--time-budget", "90s"), "90s", 90),
    "token_budget": (1000, ("--token-budget", "1000"), 1000, 1000),
    "cost_budget_usd": (1.5, ("--cost-budget", "1.5"), 1.5, 1.5),
    "prices": ({"openai:gpt-4.1": [2.0, 8.0]}, ("--price", "openai:gpt-4.1=2/8"), {"openai:gpt-4.1": [2, 8]},
               {"openai:gpt-4.1": [2, 8]}),
    "plateau_steps": (7, ("--plateau-steps", "7"), 7, 7),
    "provider_retry_window_s": (1800.0, ("--provider-retry-window", "30m"), "30m", 1800),
    "trials": (2, ("--trials", "2"), 2, 2),
    "model": ("openai:gpt-4.1", ("--model", "openai:gpt-4.1"), "openai:gpt-4.1", "openai:gpt-4.1"),
    "base_url": ("http://127.0.0.1:8000/v1", ("--base-url", "http://127.0.0.1:8000/v1"), "http://127.0.0.1:8000/v1",
                 "http://127.0.0.1:8000/v1"),
    "role_models": ({"coder": "openai:gpt-4.1"}, ("--role-model", "coder=openai:gpt-4.1"),
                    {"coder": "openai:gpt-4.1"}, {"coder": "openai:gpt-4.1"}),
    "hosts": ("off", ("--hosts", "off"), "off", "off"),
    "profile": ("torch", ("--profile", "torch"), "torch", "torch"),
    "knowledge": ("k.jsonl", ("--knowledge", "k.jsonl"), "k.jsonl", "k.jsonl"),
    "compile_mode": ("max-autotune", ("--compile-mode", "max-autotune"), "max-autotune", "max-autotune"),
    "tune_budget": (0, ("--tune-budget", "0"), 0, 0),
}
"""a value other than the default for every setting a user sets, as each front door takes it (review and
use_knowledge, whose other value depends on the door or contradicts knowledge, are walked apart)"""
APART = {"review", "use_knowledge"}


def _through_every_door(door_values: dict[str, tuple[Any, tuple[str, ...], Any, Any]], tmp_path: Path,
                        captured: list[RunConfig]) -> dict[str, RunConfig]:
    from kernelwright import mcp_server
    from kernelwright.graphs import serve

    got = {}
    for command in ("optimize", "chat"):
        words = [w for _, cli_words, _, _ in door_values.values() for w in cli_words]
        r = CliRunner().invoke(cli.app, [command, str(PROBLEM), "--seed-kernel", str(SEED), *words])
        assert r.exit_code == 2 and "captured" in r.output, r.output
        got[command] = captured[-1]
    with pytest.raises(api.UsageError, match="captured"):
        mcp_server.Server(tmp_path).start_run(str(PROBLEM), str(SEED), **{
            mcp_server.parameter(name): mcp for name, (_, _, mcp, _) in door_values.items()})
    got["mcp"] = captured[-1]
    got["serve"] = serve._settings({"problem": str(PROBLEM),  # type: ignore[typeddict-item]
                                    **{name: value for name, (_, _, _, value) in door_values.items()}})
    return got


def test_every_setting_reaches_the_run_from_every_door(tmp_path: Path, captured: list[RunConfig]) -> None:
    """A setting a user sets (RunConfig's fields made with `context.setting`) is taken by optimize, chat, the MCP
    tool and the served graph, each in its own spelling and units, and lands in the run's config as the same value."""
    pytest.importorskip("mcp")
    assert set(SAMPLES) | APART == set(context.user_settings()), "give the new setting a sample value here"
    for door, config in _through_every_door(SAMPLES, tmp_path, captured).items():
        got = config.as_dict()
        wrong = {name: (got[name], value) for name, (value, *_) in SAMPLES.items() if got[name] != value}
        assert not wrong, f"{door}: (reached the run, given) {wrong}"
    alone = {"use_knowledge": (False, ("--no-knowledge",), False, False)}
    for door, config in _through_every_door(alone, tmp_path, captured).items():
        assert config.use_knowledge is False, door
    for door in ("optimize", "chat", "mcp", "serve"):  # review: the other word than the door's default
        other = next(w for w in context.CHOICES["review"] if w != context.default("review", door))
        given = {"review": (other, ("--review", other), other, other)}
        assert _through_every_door(given, tmp_path, captured)[door].review == other, door


def test_each_door_declares_every_setting_with_its_default(tmp_path: Path) -> None:
    """The CLI's options, the MCP tool's schema and the served graph's input name every setting a user sets; where a
    door declares a default, it is the setting's default at that door (`context.default`)."""
    pytest.importorskip("mcp")
    from kernelwright import mcp_server
    from kernelwright.graphs import serve

    settings = context.user_settings()
    for command in ("optimize", "chat"):
        declared = _cli_defaults(command)
        for name in settings:
            param = cli._BY_SETTING[name].param
            assert param in declared, f"{command} lacks {cli.flag(name)}"
            if declared[param] is not None:
                want = context.default(name, command)
                assert declared[param] == (not want if name == "use_knowledge" else want), (command, name)
    props = {t.name: t for t in asyncio.run(mcp_server.build(tmp_path).list_tools())}["start_run"] \
        .input_schema["properties"]
    for name in settings:
        prop = props[mcp_server.parameter(name)]
        assert prop.get("description"), name
        if prop.get("default") is not None:
            assert prop["default"] == context.default(name, "mcp"), name
    assert set(settings) <= set(serve.SETTINGS)


def test_the_served_graph_reads_a_chat_messages_words_as_the_settings_types(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A chat client sends key=value words: numbers, durations in seconds and yes/no come as text and are read as the
    setting's type; a word that fits no type is one sentence, never a string taken for true."""
    from kernelwright.graphs import serve

    words = serve.settings_from_chat("problem=p.py use_knowledge=no tune_budget=0 time_budget_s=90 branches=3")
    config = serve._settings(words)  # type: ignore[arg-type]
    assert (config.use_knowledge, config.tune_budget, config.time_budget_s, config.branches) == (False, 0, 90.0, 3)
    monkeypatch.setenv("KERNELWRIGHT_ALLOW_UNCONFINED", "1")
    for given, said in (({"use_knowledge": "maybe"}, "use_knowledge 'maybe': use true or false"),
                        ({"role_models": "coder"}, "role_models 'coder': give a JSON object")):
        assert _serve_error(tmp_path, **given).startswith(said), given
