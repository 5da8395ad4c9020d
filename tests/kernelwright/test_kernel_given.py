"""A kernel is given as a file's path or as its source text, and one rule tells which (`context.kernel_file`), at
every front door: the API (and so the MCP tools), the served graph. Before it, the API took a string for a path only
when it ended in .py and the served graph only when the file existed, so a mistyped path reached the verifier as a
kernel's source at one door and was refused at the other."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kernelwright import api
from kernelwright.agents.context import RunSetupError, kernel_file, kernel_source
from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"
SOURCE = SEED.read_text().replace('"""o = x + y"""', '"""o = x + y; see kernels/add.py, a / b elsewhere"""')
"""a kernel's source with a slash and a .py in it"""


@pytest.mark.parametrize("given, path", [
    ("runs/seeds/not_written_yet.py", "runs/seeds/not_written_yet.py"),  # a path that does not exist yet
    ("seeds/kernel.txt", "seeds/kernel.txt"),  # a path that does not end in .py
    ("  seeds/kernel.py\n", "seeds/kernel.py"),  # as a shell's $(...) or a form leaves it
    (Path("any/where"), "any/where"),
    (SOURCE, None),  # source text with a slash and .py in it
    ("import torch\nx = 1 / 2\n", None),
])
def test_one_rule_tells_a_path_from_source(given: str | Path, path: str | None) -> None:
    found = kernel_file(given)
    assert (str(found) if found is not None else None) == path


def test_a_missing_file_is_refused_not_judged_as_source(tmp_path: Path) -> None:
    missing = str(tmp_path / "seed_not_there.txt")
    with pytest.raises(RunSetupError, match="no such seed kernel file"):
        kernel_source(missing)
    odd = tmp_path / "seed.txt"  # a file whose name does not end in .py is still a file
    odd.write_text(SOURCE)
    assert kernel_source(str(odd)) == (SOURCE, str(odd))
    assert kernel_source(SOURCE) == (SOURCE, None)


def test_the_api_and_the_served_graph_read_a_seed_the_same_way(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelwright.graphs import serve

    monkeypatch.setenv("KERNELWRIGHT_ALLOW_UNCONFINED", "1")
    missing = str(tmp_path / "seed_not_there.txt")
    with pytest.raises(api.UsageError) as e:
        api.start_run(PROBLEM, seed_kernel=missing, runs_dir=tmp_path / "api", config=api.RunConfig(device="cpu"))
    out = serve._start({"problem": str(PROBLEM), "seed_kernel": missing, "device": "cpu",
                        "runs_dir": str(tmp_path / "serve")})  # type: ignore[typeddict-item]
    assert out == {"error": str(e.value), "status": "failed"} and "no such seed kernel file" in str(e.value)
    assert not (tmp_path / "api").exists() and not (tmp_path / "serve").exists()
    # source text with a slash is stored as the seed, with no path, at both doors
    with api.start_run(PROBLEM, seed_kernel=SOURCE, runs_dir=tmp_path / "api",
                       config=api.RunConfig(device="cpu")) as handle:
        by_api = handle.run.info().config
        assert handle.run.kernel(by_api.seed_kernel) == SOURCE and by_api.seed_path is None
    out = serve._start({"problem": str(PROBLEM), "seed_kernel": SOURCE, "device": "cpu",
                        "runs_dir": str(tmp_path / "serve")})  # type: ignore[typeddict-item]
    by_serve = RunStore(tmp_path / "serve").open(out["run_id"]).info().config
    assert by_serve.seed_kernel == by_api.seed_kernel and by_serve.seed_path is None
    # a file's path is read and remembered, at both doors
    out = serve._start({"problem": str(PROBLEM), "seed_kernel": str(SEED), "device": "cpu",
                        "runs_dir": str(tmp_path / "serve")})  # type: ignore[typeddict-item]
    assert RunStore(tmp_path / "serve").open(out["run_id"]).info().config.seed_path == str(SEED)


def test_the_mcp_tool_says_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mcp")
    from mcp.server.mcpserver.exceptions import ToolError

    from kernelwright import mcp_server

    monkeypatch.setenv("KERNELWRIGHT_ALLOW_UNCONFINED", "1")
    app = mcp_server.build(tmp_path)
    missing = str(tmp_path / "nope" / "seed")
    with pytest.raises(ToolError, match=f"{missing}: no such seed kernel file"):
        asyncio.run(app.call_tool("start_run", {"problem": str(PROBLEM), "seed_kernel": missing, "device": "cpu"}))
