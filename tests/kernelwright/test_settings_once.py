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
                                              ({"branches": 0}, ("--branches", "0"))])
def test_a_bad_setting_gets_the_same_sentence_at_every_door(setting: dict[str, Any], cli_args: tuple[str, ...],
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mcp")
    monkeypatch.setenv("KERNELWRIGHT_ALLOW_UNCONFINED", "1")
    said = {"cli": _cli_error(*cli_args), "mcp": _mcp_error(tmp_path, **setting), "serve": _serve_error(tmp_path, **setting)}
    assert len(set(said.values())) == 1, said
    sentence = said["cli"]
    name = next(iter(setting))
    assert sentence.startswith(name) and "--" not in sentence, sentence  # the setting's own name, no CLI flag
    assert "\n" not in sentence and "Traceback" not in sentence
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())  # no run was left


def test_a_plateau_can_be_switched_off_for_a_soak() -> None:
    """`--plateau-steps 0`: a run that must last its time budget (the soak's GPU half ended on a plateau after 10 of
    its 13 minutes) never stops on a plateau; the flag's default is RunConfig's."""
    import typer

    from kernelwright.agents.archive import Archive, Step
    from kernelwright.agents.stopping import stop_reason
    from kernelwright.agents.context import NEVER, RunConfig, default
    from kernelwright.cli import app
    from kernelwright.optimize import build_config

    params = {p.name: p for p in typer.main.get_command(app).commands["optimize"].params}
    assert params["plateau_steps"].default == default("plateau_steps") == RunConfig().plateau_steps == 20
    assert build_config(plateau_steps=0).plateau() == NEVER and build_config().plateau() == 20
    flat = Archive(steps=[Step(step=i, parent_id="s", proposal_key=f"k{i}", child_id=f"c{i}", verdict="pass", reason="ok",
                               why="slower", decision="rejected")
                          for i in range(200)])
    assert stop_reason(flat, plateau_steps=build_config().plateau()) == "no improvement in the last 20 steps"
    assert stop_reason(flat, plateau_steps=build_config(plateau_steps=0).plateau()) is None


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
