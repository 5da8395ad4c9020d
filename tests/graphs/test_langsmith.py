"""LangSmith tracing: with its variables set, a run is traced one trace per generation, and the LangSmith key
reaches nothing in the run directory nor a candidate's environment; without them, nothing is sent.

A real run on the CPU, driven by a scripted model through the real graph, traces to a local HTTP server
standing in for LangSmith (LANGSMITH_ENDPOINT), which records what the LangSmith client posts (batched
to /runs/multipart or /runs/batch, or one run at a time) and answers like LangSmith.
"""

from __future__ import annotations

import email
import io
import json
import sys
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kernelwright.optimize_command import run_optimize
from kernelwright.tools.runstore import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"
sys.path.insert(0, str(ROOT / "tests" / "agents"))
from scripted import DIAGNOSIS, PROPOSAL, Scripted, call  # noqa: E402

LANGSMITH_KEY = "lsv2_pt_kwtest-fake-langsmith-key-0123456789"
PROVIDER_KEY = "sk-kwtest-provider-key-for-the-langsmith-test"
MODEL = "scripted:traced"


class LangSmith(ThreadingHTTPServer):
    """Records every request; answers GET /info with an empty server description and everything else
    with 200 {} (what the client needs to go on sending)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n) if n else b""
                with server.lock:
                    server.requests.append({"method": self.command, "path": self.path,
                                            "headers": {k.lower(): v for k, v in self.headers.items()},
                                            "body": body})
                out = b"{}"
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PATCH = do_PUT = _record

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def runs(self) -> dict[str, dict[str, Any]]:
        """Every run posted, by id, with its later patches applied."""
        runs: dict[str, dict[str, Any]] = {}

        def put(op: str, run_id: str, fields: dict[str, Any]) -> None:
            r = runs.setdefault(run_id, {"id": run_id})
            r.update({k: v for k, v in fields.items() if v is not None or op == "post"})

        for req in self.requests:
            path = req["path"].split("?")[0].rstrip("/")
            if req["method"] == "GET":
                continue
            body = _decoded(req)
            ctype = req["headers"].get("content-type", "")
            if path.endswith("/runs/multipart"):
                for name, value in _parts(ctype, body):
                    op, _, rest = name.partition(".")
                    run_id, _, field = rest.partition(".")
                    if op not in ("post", "patch") or field.startswith("attachment"):
                        continue
                    put(op, run_id, {field: value} if field else value)
            elif path.endswith("/runs/batch"):
                data = json.loads(body)
                for op in ("post", "patch"):
                    for r in data.get(op) or []:
                        put(op, str(r["id"]), r)
            elif path.endswith("/runs") and req["method"] == "POST":
                r = json.loads(body)
                put("post", str(r["id"]), r)
            elif "/runs/" in path and req["method"] == "PATCH":
                put("patch", path.rsplit("/", 1)[1], json.loads(body))
        return runs

    def bodies(self) -> Iterator[bytes]:
        for req in self.requests:
            yield _decoded(req)


def _decoded(req: dict[str, Any]) -> bytes:
    body, enc = req["body"], req["headers"].get("content-encoding", "")
    if enc == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(body)
    if enc in ("gzip", "deflate"):
        return zlib.decompress(body, 16 + zlib.MAX_WBITS if enc == "gzip" else zlib.MAX_WBITS)
    return body


def _parts(ctype: str, body: bytes) -> Iterator[tuple[str, Any]]:
    msg = email.message_from_bytes(b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + body)
    for part in msg.get_payload():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        try:
            yield name, json.loads(payload)
        except ValueError:
            yield name, payload


@pytest.fixture
def langsmith(monkeypatch: pytest.MonkeyPatch) -> Iterator[LangSmith]:
    """A stand-in LangSmith, named by the environment (LANGSMITH_TRACING left to the test)."""
    from langsmith.utils import get_env_var

    server = LangSmith()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    for name in ("LANGSMITH_TRACING", "LANGSMITH_TRACING_V2", "LANGCHAIN_TRACING", "LANGCHAIN_TRACING_V2",
                 "LANGCHAIN_API_KEY", "LANGCHAIN_ENDPOINT", "LANGSMITH_PROJECT", "LANGCHAIN_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANGSMITH_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("LANGSMITH_API_KEY", LANGSMITH_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", PROVIDER_KEY)
    get_env_var.cache_clear()  # LangSmith caches what it read of the environment
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        monkeypatch.undo()
        get_env_var.cache_clear()


def script() -> list:
    """Generation 1: BLOCK 256 -> 512. Generation 2: NUM_WARPS 4 -> 8. Both pass."""
    return [
        call("Diagnosis", DIAGNOSIS, 0),
        call("Proposal", PROPOSAL, 1),
        call("search_replace", {"old": "BLOCK = 256\n", "new": "BLOCK = 512\n"}, 2),
        call("finish", {}, 3),
        call("Diagnosis", DIAGNOSIS, 4),
        call("Proposal", {"category": "warps", "what": "NUM_WARPS 4 -> 8", "why": "more warps to hide latency",
                          "predicted_speedup": 1.05, "risk": "low", "key": "NUM_WARPS=8"}, 5),
        call("search_replace", {"old": "NUM_WARPS = 4\n", "new": "NUM_WARPS = 8\n"}, 6),
        call("finish", {}, 7),
    ]


def optimize(runs: Path, **kw: Any):
    args = dict(problem=PROBLEM, seed_kernel=SEED, model=MODEL, base_url=None, role_models=[], iterations=2,
                time_budget=None, branches=1, device="cpu", precision=None, trials=1, run_dir=runs, resume=None,
                console=Console(file=io.StringIO()), models={MODEL: Scripted(script=script())})
    return run_optimize(**{**args, **kw})


def ancestors(runs: dict[str, dict[str, Any]], run: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's parents, nearest first, up to its root."""
    out = []
    while run.get("parent_run_id"):
        run = runs[str(run["parent_run_id"])]
        out.append(run)
    return out


@pytest.mark.timeout(300)
def test_a_traced_run_gives_one_trace_per_generation(tmp_path: Path, langsmith: LangSmith,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    runs_dir = tmp_path / "runs"
    summary = optimize(runs_dir)
    assert summary.status == "finished", summary
    run_id = summary.run_id
    steps = RunStore(runs_dir).open(run_id).trace()
    assert [(s["step_id"], s["proposal"]["key"], s["verdict"]) for s in steps] == \
        [("g1b0", "BLOCK=512", "pass"), ("g2b0", "NUM_WARPS=8", "pass")]

    # read at once: the run flushed its traces before it returned
    runs = langsmith.runs()
    roots = sorted((r for r in runs.values() if not r.get("parent_run_id")), key=lambda r: r["name"])
    assert [r["name"] for r in roots] == [f"kernelwright {run_id} generation 1",
                                          f"kernelwright {run_id} generation 2"], \
        "exactly one root run per generation, and nothing else at the root"
    for g, root in enumerate(roots, 1):
        assert root.get("end_time"), "the run ended without flushing its last traces"
        meta = root["extra"]["metadata"]
        assert meta["run_id"] == run_id and meta["generation"] == g and meta["branches"] == [f"g{g}b0"]
        assert meta["models"] == {"analyst": MODEL, "strategist": MODEL, "coder": MODEL}
        assert meta["device"] == "cpu" and meta["problem"].endswith("add_problem.py")
        assert "kernelwright" in root["tags"]
        assert str(root["trace_id"]) == root["id"] and not root.get("error")
        assert [s["step_id"] for s in root["outputs"]["steps"]] == [f"g{g}b0"]
    by_trace = {r["id"]: g for g, r in enumerate(roots, 1)}
    for r in runs.values():  # no orphan, no run outside the generations' traces
        assert str(r["trace_id"]) in by_trace, r["name"]
        assert not r.get("parent_run_id") or str(r["parent_run_id"]) in runs, r["name"]
    # generation 1's trace holds the seed; each trace holds its generation's roles, nested
    seeds = [r for r in runs.values() if r["name"] == "seed"]
    assert [by_trace[str(r["trace_id"])] for r in seeds] == [1]
    for role in ("analyst", "strategist", "coder", "verifier"):
        found = [r for r in runs.values() if r["name"] == role]
        assert sorted(by_trace[str(r["trace_id"])] for r in found) == [1, 2], role
        for r in found:
            names = [a["name"] for a in ancestors(runs, r)]
            assert "branch" in names and names[-1].startswith(f"kernelwright {run_id} generation")
            assert r["extra"]["metadata"]["run_id"] == run_id
    model_calls = [r for r in runs.values() if r["run_type"] == "llm"]
    assert len(model_calls) == 8 and all(r["extra"]["metadata"]["run_id"] == run_id for r in model_calls)
    roles = sorted(next(a["name"] for a in ancestors(runs, r) if a["name"] in ("analyst", "strategist", "coder"))
                   for r in model_calls)
    assert roles == ["analyst"] * 2 + ["coder"] * 4 + ["strategist"] * 2
    tools = [r for r in runs.values() if r["run_type"] == "tool"]
    assert sorted(r["name"] for r in tools) == ["finish", "finish", "search_replace", "search_replace"]
    assert all(any(a["name"] == "coder" for a in ancestors(runs, r)) for r in tools)
    for r in (r for r in runs.values() if r["name"] == "verifier"):
        assert r["outputs"]["results"][0]["verdict"] == "pass"

    # the key authenticates the client to LangSmith, and goes nowhere else
    posts = [q for q in langsmith.requests if q["method"] != "GET"]
    assert posts and all(q["headers"].get("x-api-key") == LANGSMITH_KEY for q in posts)
    for body in langsmith.bodies():
        assert LANGSMITH_KEY.encode() not in body and PROVIDER_KEY.encode() not in body
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {"run.json", "trace.jsonl", "checkpoints.sqlite"} <= {p.name for p in files}
    assert any(p.parent.name == "transcripts" for p in files)
    for path in files:
        data = path.read_bytes()
        assert LANGSMITH_KEY.encode() not in data, f"the LangSmith key leaked into {path}"
        assert PROVIDER_KEY.encode() not in data, f"the provider key leaked into {path}"


def test_each_graph_call_is_named_after_the_generation_it_runs() -> None:
    from types import SimpleNamespace

    from langgraph.types import Command

    from kernelwright.graphs.tracing import branch_ids, generation_ahead

    def at(generation: int, *nxt: str) -> SimpleNamespace:
        return SimpleNamespace(values={"generation": generation, "archive": {"version": generation}}, next=nxt)

    assert generation_ahead({"generation": 0}, SimpleNamespace(values={}, next=())) == (1, False, None)  # new run
    assert generation_ahead(None, at(0, "seed")) == (1, False, {"version": 0})       # cut short in the seed
    assert generation_ahead(None, at(2, "select")) == (3, False, {"version": 2})     # after a generation
    assert generation_ahead(None, at(3, "branch", "branch")) == (3, True, {"version": 3})  # cut short in one
    assert generation_ahead(None, at(3, "archive")) == (3, True, {"version": 3})
    assert generation_ahead(Command(resume={}), at(3, "branch")) == (3, True, {"version": 3})  # a review's answer
    assert branch_ids({"generation": 3, "parents": ["a", "b"]}, 3) == ["g3b0", "g3b1"]
    assert branch_ids({"generation": 0}, 1) == []


def test_no_langsmith_variable_reaches_a_candidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelwright.evaluators.pool import scrubbed_env  # what every candidate process is started with

    monkeypatch.setenv("LANGSMITH_API_KEY", LANGSMITH_KEY)
    monkeypatch.setenv("LANGCHAIN_API_KEY", LANGSMITH_KEY)
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    monkeypatch.setenv("LANGSMITH_ENDPOINT", "http://127.0.0.1:9")
    env = scrubbed_env(str(tmp_path), "cpu")
    assert LANGSMITH_KEY not in env.values()
    assert not [k for k in env if k.startswith(("LANGSMITH", "LANGCHAIN"))]


@pytest.mark.timeout(300)
def test_without_tracing_nothing_is_sent(tmp_path: Path, langsmith: LangSmith) -> None:
    """The endpoint and the key are set, tracing is not: not one request, and the same run."""
    from kernelwright.graphs import tracing

    assert not tracing.enabled()
    summary = optimize(tmp_path / "runs")
    assert summary.status == "finished", summary
    steps = RunStore(tmp_path / "runs").open(summary.run_id).trace()
    assert [(s["step_id"], s["proposal"]["key"], s["verdict"]) for s in steps] == \
        [("g1b0", "BLOCK=512", "pass"), ("g2b0", "NUM_WARPS=8", "pass")]
    assert langsmith.requests == []
