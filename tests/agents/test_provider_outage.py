"""A model provider's outage survived (issue 24, item 3): transient failures (connection refused, 429, 5xx,
timeouts) are retried with backoff for a window (`provider_retry_window_s`, `--provider-retry-window`); past
it the run stops with status `failed`, exit 1 and the resume command printed, and resumes once the provider
answers. No Python None reaches the screen or the trace.

The provider is the real OpenAI-compatible client against a local HTTP server that fails with 503 (or is not
listening yet) and then answers; the loop's evaluations are fake (`tests/kernelwright/fake_evaluations.py`),
so the tests take seconds.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from kernelwright.agents import llm
from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"
sys.path.insert(0, str(ROOT / "tests" / "agents"))
sys.path.insert(0, str(ROOT / "tests" / "kernelwright"))
from fake_evaluations import fake_evaluations  # noqa: E402
from scripted import DIAGNOSIS, PROPOSAL, Scripted  # noqa: E402

pytestmark = pytest.mark.timeout(300)


class Status(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(f"HTTP {code} from the provider")
        self.status_code = code


# -- the retry window -------------------------------------------------------------------------------------


def test_transient_failures_are_retried_for_the_window() -> None:
    m = Scripted(script=[Status(503), Status(429), ConnectionError("refused"), AIMessage(content="hi")])
    usage = llm.Usage(retry_window_s=60)
    assert llm.invoke_with_retry(m, [], usage, base_s=0.01).content == "hi"
    assert usage.retries == 3 and usage.calls == 1
    assert llm.Usage().retry_window_s == llm.PROVIDER_RETRY_WINDOW_S >= 600  # the default: at least 10 minutes


def test_past_the_window_the_call_fails_in_one_sentence() -> None:
    m = Scripted(script=[Status(503)] * 1000)
    t0 = time.monotonic()
    with pytest.raises(llm.ProviderError, match=r"^the model provider failed after \d+ attempts over \d+ s \(HTTP 503\)"):
        llm.invoke_with_retry(m, [], llm.Usage(retry_window_s=0.5), base_s=0.05)
    assert 0.4 < time.monotonic() - t0 < 5
    # a failure retrying cannot fix is not retried at all
    m = Scripted(script=[Status(401), AIMessage(content="never")])
    with pytest.raises(llm.ProviderError, match=r"^the model provider failed \(HTTP 401\)"):
        llm.invoke_with_retry(m, [], llm.Usage(retry_window_s=60), base_s=0)
    assert len(m.script) == 1


def test_a_stop_request_ends_the_retries() -> None:
    m = Scripted(script=[Status(503)] * 1000)
    asked = threading.Event()
    threading.Timer(0.3, asked.set).start()
    t0 = time.monotonic()
    with pytest.raises(llm.ProviderError, match="HTTP 503"):
        llm.invoke_with_retry(m, [], llm.Usage(retry_window_s=600, stopping=asked.is_set), base_s=0.05, max_s=0.1)
    assert time.monotonic() - t0 < 5


def test_an_outage_step_is_recorded_but_neither_counted_nor_held_against_the_move() -> None:
    from kernelwright.agents.archive import Archive, Outcome, admit, seed
    from kernelwright.agents.roles import counted_steps

    a = seed(Archive(), Outcome(child_id="s", verdict="pass", reason="ok"))
    a, step = admit(a, "s", "BLOCK=512", None, step_id="g1b0", no_child="the model provider failed (HTTP 503): down",
                    no_child_reason="provider_failed")
    assert step.reason == "provider_failed" and step.child_id is None and "HTTP 503" in step.why
    assert counted_steps(a) == 0 and a.failed.get("s", []) == [] and len(a.steps) == 1
    a, _ = admit(a, "s", "BLOCK=512", None, step_id="g1b1")  # a coder that gave up: counted, and marked tried
    assert counted_steps(a) == 1 and a.failed["s"] == ["BLOCK=512"]


# -- a local OpenAI-compatible server that is down, then answers -------------------------------------------


def completion(message: dict[str, Any]) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "local-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": None, **message},
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 200, "completion_tokens": 20, "total_tokens": 220}}


def tool_call(name: str, args: dict[str, Any], i: int) -> dict[str, Any]:
    return completion({"tool_calls": [{"id": f"call_{i}", "type": "function",
                                       "function": {"name": name, "arguments": json.dumps(args)}}]})


class Provider(ThreadingHTTPServer):
    """Fails with 503 while `down` (or for the next `fail_next` requests), else replays `answers`."""

    def __init__(self, answers: list[dict[str, Any]], port: int = 0, down: bool = False, fail_next: int = 0,
                 retry_after: str | None = None) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.answers, self.down, self.fail_next, self.retry_after = answers, down, fail_next, retry_after
        self.requests = 0
        self.failed = 0

    def start(self) -> Provider:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}/v1"


class Handler(BaseHTTPRequestHandler):
    server: Provider

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        srv = self.server
        srv.requests += 1
        if srv.down or srv.fail_next > 0:
            srv.fail_next -= 1
            srv.failed += 1
            status, payload = 503, {"error": {"message": "the service is unavailable", "type": "server_error"}}
        else:
            status, payload = 200, srv.answers.pop(0) if srv.answers else completion({"content": "done"})
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status != 200 and srv.retry_after is not None:
            self.send_header("Retry-After", srv.retry_after)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def one_step() -> list[dict[str, Any]]:
    """The model's answers for one step: diagnosis, proposal, one edit, finish."""
    return [tool_call("Diagnosis", DIAGNOSIS, 1), tool_call("Proposal", PROPOSAL, 2),
            tool_call("search_replace", {"old": "BLOCK = 256\n", "new": "BLOCK = 512\n"}, 3),
            tool_call("finish", {}, 4)]


def test_refused_connections_for_a_while_are_survived() -> None:
    with socket.socket() as s:  # a port nothing listens on yet: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    later: list[Provider] = []
    timer = threading.Timer(1.5, lambda: later.append(Provider([completion({"content": "back"})], port=port).start()))
    timer.start()
    try:
        model = llm.Models(base_url=f"http://127.0.0.1:{port}/v1").chat_model("openai:local-model")
        usage = llm.Usage(retry_window_s=60)
        msg = llm.invoke_with_retry(model, [HumanMessage("hello")], usage, base_s=0.5, max_s=1.0)
    finally:
        timer.join()
        for p in later:
            p.stop()
    assert msg.content == "back" and usage.retries >= 1


def test_a_run_survives_an_outage_inside_the_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    from kernelwright.optimize_command import run_optimize

    fake_evaluations(monkeypatch)
    provider = Provider(one_step(), fail_next=4, retry_after="0").start()
    try:
        summary = run_optimize(problem=PROBLEM, seed_kernel=SEED, model="openai:local-model", base_url=provider.url,
                               role_models=[], iterations=1, time_budget=None, branches=1, device="cpu",
                               precision=None, trials=1, run_dir=tmp_path, resume=None,
                               console=Console(file=io.StringIO()), provider_retry_window="60s")
    finally:
        provider.stop()
    assert summary.status == "finished" and summary.exit_code == 0, summary
    assert provider.failed == 4 and not provider.answers
    (rec,) = RunStore(tmp_path).open(summary.run_id).trace()
    assert rec["llm"]["analyst"]["retries"] == 4 and rec["child"] and rec["verdict"] == "pass"


def test_past_the_window_the_run_fails_resumably_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from kernelwright.cli import app

    fake_evaluations(monkeypatch)
    provider = Provider(one_step(), down=True).start()
    runner = CliRunner()
    try:
        r = runner.invoke(app, ["optimize", str(PROBLEM), "--seed-kernel", str(SEED), "--model", "openai:local-model",
                                "--base-url", provider.url, "--iterations", "1", "--branches", "1", "--device", "cpu",
                                "--trials", "1", "--provider-retry-window", "1s", "--run-dir", str(tmp_path)])
        (info,) = RunStore(tmp_path).list()
        assert r.exit_code == 1, r.output
        assert info.status == "failed" and info.resumable, info
        assert f"run {info.id}: failed (the model provider failed after" in r.output and "HTTP 503" in r.output
        assert f"resume: kernelwright optimize --resume {info.id} --run-dir {tmp_path}" in r.output, r.output
        assert "None" not in r.output, r.output
        t = runner.invoke(app, ["trace", info.id, "--run-dir", str(tmp_path)])
        assert t.exit_code == 0 and "None" not in t.output, t.output
        assert "-> no child" in t.output and "verifier: not run (no child: the model provider failed" in t.output
        (rec,) = RunStore(tmp_path).open(info.id).trace()
        assert rec["decision"]["reason"] == "provider_failed"
        # the analyst waited out the window; the strategist, on the same provider, did not wait out a second one
        assert rec["llm"]["analyst"]["error_kind"] == "provider" and "strategist" not in rec["llm"]
        from kernelwright.report import write_report

        page = write_report(RunStore(tmp_path).open(info.id), tmp_path / "report.html").read_text()
        assert "None" not in page and "failed" in page
        # the provider is back: the run resumes, and the outage's step did not spend the one-step budget
        provider.down = False
        r = runner.invoke(app, ["optimize", "--resume", info.id, "--run-dir", str(tmp_path)])
        assert r.exit_code == 0, r.output
    finally:
        provider.stop()
    run = RunStore(tmp_path).open(info.id)
    assert run.info().status == "finished" and not run.info().resumable
    trace = run.trace()
    assert [x["step_id"] for x in trace] == ["g1b0", "g2b0"] and trace[1]["child"] and trace[1]["verdict"] == "pass"
    assert run.info().stop_reason == "iteration budget reached (1 steps)"
    assert "None" not in r.output
