"""The optimization graph end to end on the CPU with language-model policies: a scripted model driving
the real graph, and the real OpenAI-compatible client against a local HTTP server (a 429 first, then tool
calls, a malformed one among them). The API key must reach nothing in the run directory."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kernelwright.optimize_command import UsageError, run_optimize
from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"
sys.path.insert(0, str(ROOT / "tests" / "agents"))
from scripted import DIAGNOSIS, PROPOSAL, Scripted, call, malformed  # noqa: E402


def optimize(run_dir: Path, model: str, **kw: Any):
    args = dict(problem=PROBLEM, seed_kernel=SEED, model=model, base_url=None, role_models=[], iterations=1,
                time_budget=None, branches=1, device="cpu", precision=None, trials=1, run_dir=run_dir, resume=None,
                console=Console(file=io.StringIO()))
    return run_optimize(**{**args, **kw})


@pytest.mark.timeout(300)
def test_a_scripted_model_drives_the_real_graph(tmp_path: Path) -> None:
    thought = call("Diagnosis", DIAGNOSIS, 1)
    thought.additional_kwargs["reasoning_content"] = "Two loads and a store per element: bandwidth."
    m = Scripted(script=[
        call("Diagnosis", {**DIAGNOSIS, "bottleneck": "bandwidth"}, 0),      # invalid: sent back
        thought,
        malformed("Proposal", "{\"category\": ", 2),
        call("Proposal", PROPOSAL, 3),
        call("search_replace", {"old": "BLOCK = 256\n", "new": "BLOCK = 512\n"}, 4),
        call("quick_check", {}, 5),
        call("finish", {}, 6),
    ])
    models = {"scripted:graph": m}
    summary = optimize(tmp_path, "scripted:graph", models=models)
    assert summary.status == "finished" and not m.script
    run = RunStore(tmp_path).open(summary.run_id)
    (rec,) = run.trace()
    assert rec["diagnosis"]["bottleneck"] == "memory" and rec["proposal"]["key"] == "BLOCK=512"
    assert "-BLOCK = 256\n+BLOCK = 512" in rec["coder"]["diff"] and rec["verdict"] == "pass"
    assert set(rec["llm"]) == {"analyst", "strategist", "coder"}
    assert rec["llm"]["analyst"]["calls"] == 2 and rec["llm"]["coder"]["calls"] == 3
    assert rec["llm"]["analyst"]["reasoning"] == ["Two loads and a store per element: bandwidth."]
    assert rec["tokens"] == 2 * 110 + 110 + 55 + 3 * 110 and rec["policy"] == "scripted:graph"
    coder_log = json.loads((run.path / rec["llm"]["coder"]["transcript"]).read_text())
    assert [t["content"][:4] for t in coder_log if t["role"] == "tool"] == ["repl", "pass", "done"]
    assert run.eval(rec["child"])["verdict"] == "pass"


def _step_script(n: int) -> list:
    msgs = []
    for i in range(n):
        msgs += [call("Diagnosis", DIAGNOSIS, 5 * i), call("Proposal", {**PROPOSAL, "key": f"v{i}"}, 5 * i + 1),
                 call("write_kernel", {"source": SEED.read_text() + f"\n# variant {i}\n"}, 5 * i + 2),
                 call("quick_check", {}, 5 * i + 3), call("finish", {}, 5 * i + 4)]
    return msgs


@pytest.mark.timeout(300)
def test_token_and_cost_budgets_stop_the_run(tmp_path: Path) -> None:
    # one step = 5 calls x 110 tokens = 550 tokens; a 1000-token budget is reached after the second step
    models = {"scripted:tokens": Scripted(script=_step_script(4))}
    summary = optimize(tmp_path / "t", "scripted:tokens", models=models, iterations=4, token_budget=1000)
    assert summary.stop_reason == "token budget reached (1100 of 1000 tokens)"
    info = RunStore(tmp_path / "t").open(summary.run_id).info()
    assert info.steps == 2 and info.tokens == 1100
    # at $1000 / $10000 per million input / output tokens a step costs 5 x (0.1 + 0.1) = $1.00
    models = {"scripted:cost": Scripted(script=_step_script(4))}
    summary = optimize(tmp_path / "c", "scripted:cost", models=models, iterations=4, cost_budget=1.5,
                       prices=["scripted:cost=1000/10000"])
    assert summary.stop_reason == "cost budget reached ($2.0000 of $1.5000)"
    assert RunStore(tmp_path / "c").open(summary.run_id).info().cost_usd == pytest.approx(2.0)


@pytest.mark.parametrize("kw, words", [
    (dict(model="scripted:graph", cost_budget=1.0), "needs the price of scripted:graph"),
    (dict(model="scripted:graph", prices=["scripted:graph=cheap"]), "USD per million"),
    (dict(model="builtin", token_budget=10), "builtin policy makes none"),
])
def test_bad_budget_flags_are_one_sentence(tmp_path: Path, kw: dict[str, Any], words: str) -> None:
    models = {"scripted:graph": Scripted()}
    with pytest.raises(UsageError, match=words):
        optimize(tmp_path, models=models, **kw)


def test_role_models_mix_builtin_and_model(tmp_path: Path) -> None:
    m = Scripted(script=[call("Diagnosis", DIAGNOSIS, 0)])
    models = {"scripted:analyst-only": m}
    summary = optimize(tmp_path, "builtin", models=models, role_models=["analyst=scripted:analyst-only"])
    (rec,) = RunStore(tmp_path).open(summary.run_id).trace()
    assert set(rec["llm"]) == {"analyst"} and rec["coder"]["policy"] == "builtin" and rec["verdict"] == "pass"


def test_a_provider_that_fails_for_good_stops_the_run_with_one_sentence(tmp_path: Path) -> None:
    class Denied(Exception):
        status_code = 401

    models = {"scripted:denied": Scripted(script=[Denied("invalid API key"), Denied("invalid API key")])}
    summary = optimize(tmp_path, "scripted:denied", models=models)
    assert summary.status == "failed" and summary.exit_code == 1 and summary.resumable  # fix the key, then resume
    assert summary.stop_reason == "the model provider failed (HTTP 401): invalid API key"
    (rec,) = RunStore(tmp_path).open(summary.run_id).trace()
    assert rec["diagnosis"]["bottleneck"] == "unknown" and "HTTP 401" in rec["llm"]["analyst"]["error"]
    assert rec["proposal"] is None and rec["child"] is None


@pytest.mark.parametrize("kw, words", [
    (dict(model="gpt-4"), "provider:model"),
    (dict(model="builtin", role_models=["critic=openai:x"]), "ROLE one of analyst"),
    (dict(model="builtin", role_models=["coder=x"]), "provider:model"),
    (dict(model="builtin", base_url="http://127.0.0.1:1/v1"), "base_url needs a model"),  # the CLI says the flags
    (dict(model="scripted:graph", role_models=["coder=builtin"], seed_kernel=None), "seed_kernel"),
])
def test_bad_model_flags_are_one_sentence(tmp_path: Path, kw: dict[str, Any], words: str) -> None:
    models = {"scripted:graph": Scripted()}
    with pytest.raises(UsageError, match=words):
        optimize(tmp_path, models=models, **kw)


@pytest.mark.timeout(300)
def test_without_a_seed_the_model_writes_the_first_generation(tmp_path: Path) -> None:
    seed = SEED.read_text()
    wrong = seed.replace("tl.load(x + offs, mask=m) + tl.load", "tl.load(x + offs, mask=m) - tl.load")
    m = Scripted(script=[
        call("write_kernel", {"source": wrong}, 0),
        call("finish", {}, 1),                                               # refused: wrong output
        call("search_replace", {"old": "mask=m) - tl.load", "new": "mask=m) + tl.load"}, 2),
        call("finish", {}, 3),
        call("write_kernel", {"source": seed.replace("BLOCK = 256", "BLOCK = 128")}, 4),
        call("finish", {}, 5),
        call("Diagnosis", DIAGNOSIS, 6),
        call("Proposal", PROPOSAL | {"what": "NUM_WARPS 4 -> 8", "key": "NUM_WARPS=8", "category": "warps"}, 7),
        call("search_replace", {"old": "NUM_WARPS = 4", "new": "NUM_WARPS = 8"}, 8),
        call("finish", {}, 9),
    ])
    models = {"scripted:writer": m}
    summary = optimize(tmp_path, "scripted:writer", models=models, seed_kernel=None, branches=2)
    assert summary.status == "finished" and not m.script, summary
    run = RunStore(tmp_path).open(summary.run_id)
    attempts = [a.model_dump() for a in run.info().config.seed_attempts]
    assert [a["verdict"] for a in attempts] == ["pass", "pass"] and attempts[0]["calls"] == 4
    first = json.loads((run.path / attempts[0]["transcript"]).read_text())
    assert any("wrong_output" in t["content"] for t in first if t["role"] == "tool")
    assert run.info().config.seed_kernel == attempts[0]["kernel"]  # untimed on the CPU: the first that passes
    (rec,) = run.trace()
    assert rec["parent"] == attempts[0]["kernel"] and "+NUM_WARPS = 8" in rec["coder"]["diff"]


def test_the_cli_refuses_bad_model_flags_in_one_sentence(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    for flags, words in ((["--model", "gpt-4"], "provider:model"),
                         (["--role-model", "critic=openai:gpt-4.1"], "ROLE one of"),
                         (["--model", "openai:gpt-4.1"], "the model openai:gpt-4.1 cannot be used")):
        p = subprocess.run([sys.executable, "-m", "kernelwright.cli", "optimize", str(PROBLEM),
                            "--seed-kernel", str(SEED), *flags, "--run-dir", str(tmp_path)],
                           capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
        assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr, p.stderr


def completion(message: dict[str, Any]) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "local-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": None, **message},
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 200, "completion_tokens": 20, "total_tokens": 220}}


def tool_call(name: str, arguments: str, i: int) -> dict[str, Any]:
    return {"tool_calls": [{"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}]}


class Server(ThreadingHTTPServer):
    def __init__(self, answers: list[tuple[int, dict[str, Any]]]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.answers = answers
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str] = []


class Handler(BaseHTTPRequestHandler):
    server: Server

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        self.server.auth.append(self.headers.get("Authorization", ""))
        status, payload = self.server.answers.pop(0) if self.server.answers else (
            200, completion({"content": "nothing more to do"}))
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 429:
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.timeout(300)
def test_the_openai_client_against_a_local_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-kernelwright-test-SECRET-4242"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    server = Server([
        (429, {"error": {"message": "slow down", "type": "rate_limit_exceeded", "code": "rate_limit_exceeded"}}),
        (200, completion(tool_call("Diagnosis", json.dumps(DIAGNOSIS), 1))),
        (200, completion(tool_call("Proposal", "{\"category\": \"tiling\", \"what\": ", 2))),   # malformed
        (200, completion(tool_call("Proposal", json.dumps(PROPOSAL), 3))),
        (200, completion(tool_call("search_replace", json.dumps({"old": "BLOCK = 256\n", "new": "BLOCK = 512\n"}),
                                   4))),
        (200, completion(tool_call("finish", "{}", 5))),
    ])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        summary = optimize(tmp_path, "openai:local-model", base_url=f"http://127.0.0.1:{server.server_port}/v1")
    finally:
        server.shutdown()
        server.server_close()
    assert summary.status == "finished", summary
    assert len(server.requests) == 6 and not server.answers
    assert server.requests[0] == server.requests[1], "the rate-limited request was sent again as it was"
    assert all(a == f"Bearer {secret}" for a in server.auth)
    assert server.requests[1]["tools"][0]["function"]["name"] == "Diagnosis"
    strategist_retry = server.requests[3]["messages"]
    assert strategist_retry[-1]["role"] == "tool" and "could not be parsed" in strategist_retry[-1]["content"]
    run = RunStore(tmp_path).open(summary.run_id)
    (rec,) = run.trace()
    assert rec["llm"]["analyst"]["retries"] == 1
    assert rec["tokens"] == 5 * 220 and rec["verdict"] == "pass"
    assert "+BLOCK = 512" in rec["coder"]["diff"]
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"the API key leaked into {path}"
    from kernelwright.evaluators.pool import scrubbed_env  # what every candidate process is started with

    assert secret not in scrubbed_env(str(tmp_path), "cpu").values()
