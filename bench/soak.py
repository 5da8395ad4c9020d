"""A soak test of the optimization loop on the CPU (issue 24, item 6, its CPU half): a long model-driven run
through provider outages, a SIGKILL and two resumes, checked for steps lost or repeated, with the run
directory's size per step.

    python bench/soak.py                          # 200 steps, outages of 2 minutes (about 10 minutes in all)
    python bench/soak.py --steps 12 --outage-s 1  # the short version (tests/kernelwright/test_soak_smoke.py)

What runs:
- The model is a local OpenAI-compatible HTTP server in this process (a thread) that plays every role
  deterministically from the request: the analyst's Diagnosis, the strategist's Proposal (a BLOCK or NUM_WARPS
  value of the parent other than its own and other than those already tried on it, the sibling's choice
  number taken into account), the coder's search_replace of that knob's line (tagged with a hash of parent and
  key, so every child is a new kernel) and then finish(). The run talks to it as to any provider, through
  `--model openai:soak-model --base-url http://127.0.0.1:PORT/v1`.
- The driver is `kernelwright optimize` on the CPU in a child process (this script with `--child`, so it can be
  SIGKILLed), with one stand-in: candidates are judged by a fake evaluator that passes every kernel, untimed
  (as the CPU does), without running it. The real verifier is measured elsewhere; here it would cost minutes
  per step. And the plateau rule is set out of reach (`plateau_steps`), since on the CPU no child is ever timed,
  so none is ever a new elite and the rule would end the run after 20 steps.
- The schedule: at about a quarter of the steps the provider goes down for `--outage-s` (503 for the first
  half, then connection refused), shorter than the run's `--provider-retry-window` (`--window-s`): the run must
  ride it out. At a random step between 40 % and 55 % the driver is SIGKILLed while a coder waits on the model,
  and resumed. At 60 % the provider goes down again (503, then refused) and stays down until the run gives up
  past its retry window: the run must end `failed`, exit 1, resumable, with the resume command printed; the
  provider comes back and the run is resumed to its step budget.

What is checked (exit 1 with one sentence when a check fails): the steps that count in trace.jsonl are the steps
budgeted, each step id appears once, the generations are contiguous and each complete, the archive's step list
is the trace's, every counted step made a new child, the first outage cost no step (its calls were retried),
the second outage's generation is recorded as `provider_failed` and not counted, and each phase ends with the
status and exit code it should. Reported: the status words after each phase (after the SIGKILL as
`kernelwright runs` shows it), retries, model answers redone after the kill, wall time, and the run directory's
size after every 10 steps (bytes per step, the checkpoint database's share).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODEL = "openai:soak-model"
POLL_S = 0.1
"""how often the orchestrator looks at the run directory and the child (it waits on files and states)"""

# the add problem and its two-knob seed (BLOCK, NUM_WARPS) the graph tests use: small, so nothing but the loop
# costs time
PROBLEM_SRC = (ROOT / "tests" / "graphs" / "add_problem.py").read_text()
SEED_SRC = (ROOT / "tests" / "graphs" / "add_seed.py").read_text()

KNOBS = {"BLOCK": (64, 128, 256, 512, 1024, 2048), "NUM_WARPS": (1, 2, 4, 8)}


class SoakFailure(Exception):
    """A check of the soak failed, or the run did not behave as the schedule needs; the message is one sentence."""


# -- the scripted model: an OpenAI-compatible server ---------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return str(content or "")


def _parent_source(prompt: str) -> str:
    """The parent kernel a strategist's or coder's prompt shows (its first python block after the heading)."""
    m = re.search(r"## The parent kernel[^\n]*\n```python\n(.*?)\n```", prompt, re.S)
    return m.group(1) + "\n" if m else ""


def _knob_lines(source: str) -> dict[str, tuple[str, int]]:
    """knob name -> (its whole line, its value) in a kernel source."""
    out = {}
    for name in KNOBS:
        m = re.search(rf"^{name} = (\d+).*$", source, re.M)
        if m:
            out[name] = (m.group(0), int(m.group(1)))
    return out


def _tag(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


def strategist_proposal(prompt: str) -> dict[str, Any]:
    """A knob move of the parent: not its own value, not a key already tried on it, and the sibling's choice
    number when other branches work on the same parent (so siblings propose different keys)."""
    parent = _parent_source(prompt)
    knobs = _knob_lines(parent)
    tried_m = re.search(r"## Changes already tried on this parent[^\n]*\n([^\n]*)\n", prompt)
    tried = {k.strip() for k in (tried_m.group(1) if tried_m else "").split(",")}
    rank_m = re.search(r"propose your choice number (\d+)", prompt)
    rank = int(rank_m.group(1)) - 1 if rank_m else 0
    blocks = [f"BLOCK={v}" for v in KNOBS["BLOCK"] if v != knobs.get("BLOCK", ("", 0))[1]]
    warps = [f"NUM_WARPS={v}" for v in KNOBS["NUM_WARPS"] if v != knobs.get("NUM_WARPS", ("", 0))[1]]
    moves = [m for pair in zip(blocks, warps + [""] * len(blocks)) for m in pair if m]
    turn = int(_tag(parent), 16) % len(moves)  # the first choice differs from parent to parent
    moves = [m for m in moves[turn:] + moves[:turn] if m not in tried] or moves
    key = moves[rank % len(moves)]
    name, value = key.split("=")
    return {"category": "tiling" if name == "BLOCK" else "warps",
            "what": f"{name} {knobs.get(name, ('', '?'))[1]} -> {value}",
            "why": "the soak test's scripted strategist: one knob move per step",
            "predicted_speedup": 1.02, "risk": "low", "key": key}


def coder_edit(prompt: str) -> dict[str, Any]:
    """The search_replace that applies the proposal's key to the parent's knob line, tagged by parent and key."""
    parent = _parent_source(prompt)
    m = re.search(r"key ([A-Z_]+)=(\d+);", prompt)
    if not m or m.group(1) not in KNOBS:
        return {"old": "", "new": ""}  # answered with an error by the tool: the step then makes no child (a check)
    name, value = m.group(1), m.group(2)
    line = _knob_lines(parent).get(name, ("", 0))[0]
    return {"old": line + "\n", "new": f"{name} = {value}  # soak {_tag(parent, name + '=' + value)}\n"}


DIAGNOSIS = {"bottleneck": "memory", "evidence": ["not timed: the CPU's interpreter (soak test)"], "headroom": None,
             "summary": "Elementwise add: bandwidth-bound (scripted analyst)."}


class ScriptedModel:
    """The roles' answers, chosen by the tools a request offers: Diagnosis (analyst), Proposal (strategist),
    the coder's editing tools (search_replace first, finish once a tool has answered)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answers: Counter[str] = Counter()
        """successful answers by role"""
        self.refused_503 = 0

    @staticmethod
    def role_of(request: dict[str, Any]) -> str:
        tools = {(t.get("function") or {}).get("name") for t in request.get("tools") or []}
        return ("analyst" if "Diagnosis" in tools else "strategist" if "Proposal" in tools
                else "coder" if "search_replace" in tools else "other")

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request.get("messages") or []
        prompt = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
        role = self.role_of(request)
        call: tuple[str, dict[str, Any]] | None = None
        if role == "analyst":
            call = ("Diagnosis", DIAGNOSIS)
        elif role == "strategist":
            call = ("Proposal", strategist_proposal(prompt))
        elif role == "coder":
            answered = any(m.get("role") == "tool" for m in messages)
            call = ("finish", {}) if answered else ("search_replace", coder_edit(prompt))
        with self.lock:
            self.answers[role] += 1
            n = sum(self.answers.values())
        message: dict[str, Any] = {"role": "assistant", "content": None if call else "ok"}
        if call:
            message["tool_calls"] = [{"id": f"call_{n}", "type": "function",
                                      "function": {"name": call[0], "arguments": json.dumps(call[1])}}]
        words = len(json.dumps(messages)) // 4
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
                "model": request.get("model", "soak-model"),
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}],
                "usage": {"prompt_tokens": words, "completion_tokens": 30, "total_tokens": words + 30}}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        provider = self.server.provider
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            request = {}
        hook = provider.before_request
        if hook is not None and hook(provider.model.role_of(request)):
            return  # the driver that asked was SIGKILLed: nobody reads an answer
        if provider.mode == "503":
            with provider.model.lock:
                provider.model.refused_503 += 1
            status, payload = 503, {"error": {"message": "the service is unavailable (soak outage)",
                                              "type": "server_error"}}
        else:
            try:
                status, payload = 200, provider.model.answer(request)
            except Exception as e:  # noqa: BLE001 - a bug of the script's model is a 500 the run sees, and a check
                status, payload = 500, {"error": {"message": f"{type(e).__name__}: {e}", "type": "server_error"}}
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, provider: Provider) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.provider = provider

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone mid-answer (the SIGKILLed driver) is expected here; anything else is shown."""
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class Provider:
    """The model's server and its state: `up`, `503` (every request answered 503), or `refused` (nothing listens
    on the port: connections are refused). The port stays the same, since the run saved its base URL."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model
        self.mode = "up"
        self.before_request: Callable[[str], bool] | None = None
        """called with each request's role before it is answered (`Soak.before_request`); True: leave it
        unanswered"""
        self._server: _Server | None = _Server(0, self)
        self.port = self._server.server_port
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def set(self, mode: str) -> None:
        if mode == "refused" and self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        elif mode != "refused" and self._server is None:
            for _ in range(100):  # the port was ours a moment ago; a rebind can race its last connections
                try:
                    self._server = _Server(self.port, self)
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                raise SoakFailure(f"the model's server could not listen on port {self.port} again")
            threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        self.mode = mode

    def close(self) -> None:
        self.set("refused")


# -- the child: kernelwright optimize with a stand-in evaluator -----------------------------------------------


def child_main(argv: list[str]) -> None:
    """`kernelwright` with `argv`, every candidate judged by a stand-in that passes it untimed, and the plateau
    rule out of reach for runs started here (saved in run.json, so the resumed runs keep it)."""
    from kernelwright import api
    from kernelwright.evaluators import EvalResult
    from kernelwright.tools.evaluation import Evaluations

    class StandIn:
        """Judges like the CPU (verified, untimed) without running anything."""

        def evaluate(self, source: str, quick: bool = False) -> EvalResult:
            return EvalResult(verdict="pass", reason="ok", detail="stand-in evaluator (bench/soak.py): not run",
                              device="cpu", timing_unavailable="stand-in evaluator (bench/soak.py)",
                              families=["base", "test_inputs"])

        def close(self) -> None:
            pass

    Evaluations.evaluator = lambda self, device: StandIn()  # type: ignore[assignment,method-assign]
    start_run = api.start_run

    def start_without_plateau(problem: Any, **kwargs: Any) -> Any:
        if kwargs.get("config") is not None:
            kwargs["config"].plateau_steps = 10 ** 9
        return start_run(problem, **kwargs)

    api.start_run = start_without_plateau  # type: ignore[assignment]
    from kernelwright.cli import app

    app(argv, prog_name="kernelwright")


# -- the orchestrator ----------------------------------------------------------------------------------------


@dataclass
class Schedule:
    steps: int
    branches: int
    outage_s: float
    window_s: float
    outage1_at: int
    kill_at: int
    outage2_at: int
    seed: int

    @classmethod
    def make(cls, steps: int, branches: int, outage_s: float, window_s: float | None, seed: int) -> Schedule:
        b = branches
        o1 = max(b, round(0.25 * steps))
        kill_lo = max(o1 + b, round(0.40 * steps))
        kill_hi = max(kill_lo, round(0.55 * steps))
        kill = random.Random(seed).randint(kill_lo, kill_hi)
        o2 = max(kill_hi + b, round(0.60 * steps))
        if o2 + b >= steps:
            need = next(n for n in range(steps, 100 * steps + 100) if cls._fits(n, b))
            raise SoakFailure(f"--steps {steps} is too few for the schedule with {b} branches: give at least {need}")
        # a call retrying from the outage's start gets through once it ends: its backoff doubles from 1 s up to
        # 60 s, so its last wait is at most min(outage + 1, 60) s past the end, inside this window
        window = window_s if window_s is not None else min(2 * outage_s + 2, outage_s + 62)
        if window <= outage_s:
            raise SoakFailure(f"--window-s {window:g} must be longer than --outage-s {outage_s:g}, or the first "
                              "outage is not ridden out")
        return cls(steps, b, outage_s, window, o1, kill, o2, seed)

    @staticmethod
    def _fits(n: int, b: int) -> bool:
        o1 = max(b, round(0.25 * n))
        kill_hi = max(max(o1 + b, round(0.40 * n)), round(0.55 * n))
        return max(kill_hi + b, round(0.60 * n)) + b < n


@dataclass
class Sample:
    steps: int
    """records in trace.jsonl when sampled"""
    wall_s: float
    total_bytes: int
    checkpoint_bytes: int
    parts: dict[str, int]


@dataclass
class Phase:
    name: str
    command: str
    exit_code: int | None = None
    status: str = ""
    """run.json's status when the phase ended"""
    stop_reason: str | None = None
    resumable: bool = False
    runs_status: str = ""
    """the status column of `kernelwright runs` when the phase ended (asked after the SIGKILL only)"""
    trace_steps: int = 0
    wall_s: float = 0.0
    end_lines: list[str] = field(default_factory=list)
    """the driver's last lines (its end lines: status, resume command)"""


class Soak:
    """The orchestrator: the model's server, the driver's three processes, the schedule and the samples.

    The schedule's events that depend on the run's progress (an outage's start, the SIGKILL) are decided by the
    model's server on the run's next request (`before_request`), so that they never race the run however
    loaded the machine; only the outages' timed halves and the samples are the orchestrator's loop's."""

    def __init__(self, schedule: Schedule, work: Path) -> None:
        self.s = schedule
        self.work = work
        self.runs = work / "runs"
        self.model = ScriptedModel()
        self.provider = Provider(self.model)
        self.provider.before_request = self.before_request
        self.samples: list[Sample] = []
        self.phases: list[Phase] = []
        self.events: list[str] = []
        self.t0 = time.monotonic()
        self.run_id: str | None = None
        self.child: subprocess.Popen[bytes] | None = None
        """the driver now running (ended by `stop` if the soak itself is interrupted)"""
        self.lock = threading.Lock()
        """the schedule's state and the trace's reader, shared by the server's threads and the loop"""
        self.phase = 0
        self.outage1: float | None = None
        self.outage1_refused: float | None = None
        self.outage1_over = False
        self.killed = False
        self.killed_at = 0
        self.outage2: float | None = None
        self.outage2_s: float | None = None
        self.wall_s = 0.0
        self._trace_offset = 0
        self._trace_lines = 0
        (work / "problem.py").write_text(PROBLEM_SRC)
        (work / "seed.py").write_text(SEED_SRC)

    # -- looking at the run directory

    @property
    def run_path(self) -> Path:
        assert self.run_id is not None
        return self.runs / self.run_id

    def trace_steps(self) -> int:
        with self.lock:
            return self._count()

    def _count(self) -> int:
        """Complete records in trace.jsonl (read incrementally: only what was appended since the last look)."""
        if self.run_id is None:
            dirs = [p.parent.name for p in self.runs.glob("*/run.json")] if self.runs.is_dir() else []
            if not dirs:
                return 0
            self.run_id = sorted(dirs)[0]
        try:
            with open(self.run_path / "trace.jsonl", "rb") as f:
                f.seek(self._trace_offset)
                data = f.read()
        except OSError:
            return 0
        end = data.rfind(b"\n") + 1
        self._trace_lines += data[:end].count(b"\n")
        self._trace_offset += end
        return self._trace_lines

    def info(self) -> dict[str, Any]:
        return json.loads((self.run_path / "run.json").read_text())

    def sample(self, steps: int) -> None:
        """The run directory's size now, by part (checkpoints, trace, transcripts, kernels, evals, archive)."""
        parts: Counter[str] = Counter()
        for dirpath, _, files in os.walk(self.run_path):
            top = Path(dirpath).relative_to(self.run_path).parts
            for name in files:
                try:
                    size = (Path(dirpath) / name).stat().st_size
                except OSError:  # replaced under us (an atomic write)
                    continue
                if top:
                    part = top[0]
                elif name.startswith("checkpoints.sqlite"):  # the database, and its write-ahead log while open
                    part = "checkpoints" if name == "checkpoints.sqlite" else "checkpoints-wal"
                else:
                    part = name.removesuffix(".jsonl").removesuffix(".json")
                parts[part] += size
        self.samples.append(Sample(steps, round(time.monotonic() - self.t0, 1), sum(parts.values()),
                                   parts["checkpoints"] + parts["checkpoints-wal"], dict(sorted(parts.items()))))

    def runs_status(self) -> str:
        """The status column `kernelwright runs` shows for the run (piped: plain columns)."""
        out = subprocess.run([sys.executable, "-c", "from kernelwright.cli import main; main()", "runs", "--run-dir",
                              str(self.runs)], capture_output=True, text=True, timeout=120, env=self.env())
        for line in out.stdout.splitlines():
            if line.startswith(self.run_id or "\0"):
                cols = re.split(r"\s{2,}", line.strip())
                return cols[2] if len(cols) > 2 else line
        return f"(not listed: {out.stdout.strip()[-200:] or out.stderr.strip()[-200:]})"

    # -- the schedule

    def before_request(self, role: str) -> bool:
        """Called by the model's server before it answers a request of `role`: starts an outage or SIGKILLs the
        driver where the run has reached the schedule's step. True: the driver was killed (nothing to answer)."""
        s, now = self.s, time.monotonic()
        with self.lock:
            n = self._count()
            if self.phase == 1 and self.outage1 is None and n >= s.outage1_at:
                self.outage1 = now
                self._outage("503", f"first outage at {n} steps, {s.outage_s:g} s in all (window {s.window_s:g} s)")
            elif self.phase == 1 and self.outage1_over and n >= s.kill_at and role == "coder" and not self.killed \
                    and self.child is not None:
                os.kill(self.child.pid, signal.SIGKILL)
                self.killed, self.killed_at = True, n
                self.events.append(f"{self._at()} SIGKILL at {n} trace records, while a coder waited on the model")
                return True
            elif self.phase == 2 and self.outage2 is None and n >= s.outage2_at:
                self.outage2 = now
                self._outage("503", f"second outage at {n} steps, until the run gives up (window {s.window_s:g} s)")
        return False

    def tick(self) -> None:
        """The outages' timed halves: 503 for half the outage, then refused (the first outage for the other half,
        the second until the driver gives up and exits)."""
        s, now = self.s, time.monotonic()
        with self.lock:
            started = self.outage1 if self.phase == 1 else self.outage2 if self.phase == 2 else None
            if started is not None and self.provider.mode == "503" and now >= started + s.outage_s / 2:
                self.outage1_refused = now
                self._outage("refused", "first outage, second half" if self.phase == 1 else
                             "second outage, second half (until the run gives up)")
            elif self.phase == 1 and self.provider.mode == "refused" and self.outage1_refused is not None \
                    and now >= self.outage1_refused + s.outage_s / 2:
                self._outage("up", "first outage over")
                self.outage1_over = True

    def _outage(self, mode: str, why: str) -> None:
        self.provider.set(mode)
        self.events.append(f"{self._at()} provider {mode}: {why}")

    def _at(self) -> str:
        return f"[{time.monotonic() - self.t0:7.1f} s]"

    # -- driving the child

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
        env.update(PYTHONUNBUFFERED="1", XDG_DATA_HOME=str(self.work / "data"), OPENAI_API_KEY="not-needed",
                   COLUMNS="200")
        return env

    def drive(self, phase: int, name: str, args: list[str], deadline_s: float) -> Phase:
        """Run the driver with `args` until it exits (or the server SIGKILLs it), sampling the run directory
        each time its trace passes a multiple of 10 records; the phase as it ended."""
        shown = "kernelwright " + " ".join(args)
        started = time.monotonic()
        with open(self.work / f"{name}.log", "wb") as log, self.lock:
            self.phase = phase
            self.events.append(f"{self._at()} {name}: {shown}")
            self.child = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", *args],
                                          stdout=log, stderr=subprocess.STDOUT, env=self.env(), cwd=self.work)
        child, limit = self.child, started + deadline_s
        sampled = self.samples[-1].steps // 10 if self.samples else -1
        while child.poll() is None:
            n = self.trace_steps()
            if self.run_id is not None and n // 10 > sampled:
                sampled = n // 10
                self.sample(n)
            self.tick()
            if time.monotonic() > limit:
                child.kill()
                child.wait()
                raise SoakFailure(f"{name}: the run made no end within {deadline_s:.0f} s (at {n} trace records); "
                                  f"see {self.work / (name + '.log')}")
            time.sleep(POLL_S)
        p = Phase(name, shown, exit_code=child.returncode, wall_s=round(time.monotonic() - started, 1),
                  trace_steps=self.trace_steps())
        if self.run_id is None:
            raise SoakFailure(f"{name}: the driver exited ({p.exit_code}) without creating a run; see "
                              f"{self.work / (name + '.log')}")
        info = self.info()
        p.status, p.stop_reason, p.resumable = info["status"], info.get("stop_reason"), info["resumable"]
        if p.exit_code == -signal.SIGKILL:  # what a user who finds the run killed is told (one CLI start: ~3 s)
            p.runs_status = self.runs_status()
        text = (self.work / f"{name}.log").read_text(errors="replace")
        p.end_lines = [ln for ln in text.splitlines() if ln.startswith((f"run {self.run_id}", "resume:"))][-3:]
        self.phases.append(p)
        self.events.append(f"{self._at()} {name}: exit {p.exit_code}, status {p.status}, {p.trace_steps} steps "
                           "in the trace")
        return p

    def stop(self) -> None:
        """End the driver if it still runs (the soak failed or was interrupted) and the model's server."""
        if self.child is not None and self.child.poll() is None:
            self.child.kill()
            self.child.wait()
        if self.provider.mode != "refused":
            self.provider.close()

    def run(self) -> None:
        s = self.s
        deadline = 60 + 5 * s.steps + 4 * s.window_s + 2 * s.outage_s
        # 1: start; the first outage, ridden out; the SIGKILL while a coder waits on the model
        p = self.drive(1, "start", [
            "optimize", str(self.work / "problem.py"), "--seed-kernel", str(self.work / "seed.py"), "--model", MODEL,
            "--base-url", self.provider.url, "--iterations", str(s.steps), "--branches", str(s.branches),
            "--device", "cpu", "--trials", "1", "--provider-retry-window", f"{s.window_s:g}s", "--no-knowledge",
            "--run-dir", str(self.runs)], deadline)
        if not self.killed:
            raise SoakFailure(f"the run ended by itself (exit {p.exit_code}, {p.status}: {p.stop_reason}) before its "
                              f"SIGKILL at step {s.kill_at}")
        resume = ["optimize", "--resume", str(self.run_id), "--run-dir", str(self.runs)]
        # 2: resume; the second outage, past the window: the run must end failed, resumable
        p = self.drive(2, "resume-after-kill", resume, deadline)
        with self.lock:
            self.phase = 0
            if self.outage2 is not None:
                self.outage2_s = time.monotonic() - self.outage2
                self._outage("up", "second outage over")
        if self.outage2 is None:
            raise SoakFailure(f"the resumed run ended (exit {p.exit_code}, {p.status}: {p.stop_reason}) before the "
                              f"second outage at step {s.outage2_at}")
        # 3: the provider is back; resume to the end
        p = self.drive(3, "resume-after-outage", resume, deadline)
        self.sample(p.trace_steps)
        self.wall_s = round(time.monotonic() - self.t0, 1)


# -- the checks ----------------------------------------------------------------------------------------------


def check(soak: Soak) -> dict[str, Any]:
    """Every check of the finished soak; raises SoakFailure with the first that fails. Returns the figures."""
    s, run = soak.s, soak.run_path
    start, after_kill, after_outage = soak.phases
    trace = [json.loads(line) for line in (run / "trace.jsonl").read_text().splitlines() if line.strip()]
    ids = [r["step_id"] for r in trace]
    failed_steps = [r for r in trace if (r.get("decision") or {}).get("reason") == "provider_failed"]
    counted = [r for r in trace if (r.get("decision") or {}).get("reason") not in ("provider_failed",
                                                                                   "reviewer_rejected")]
    repeated = sorted(i for i, c in Counter(ids).items() if c > 1)
    gens = sorted({r["generation"] for r in trace})
    by_gen: dict[int, list[int]] = {}
    for r in trace:
        by_gen.setdefault(r["generation"], []).append(r["branch"])
    ragged = [g for g, bs in by_gen.items() if sorted(bs) != list(range(len(bs))) or
              (len(bs) != s.branches and g != gens[-1])]
    archive_dir = run / "archive"
    latest = max(archive_dir.glob("*.json"), key=lambda p: int(p.stem))
    archive_ids = [st.get("step_id") for st in json.loads(latest.read_text())["steps"]]
    children = [r.get("child") for r in counted]
    no_child = [r["step_id"] for r in counted if not r.get("child") or r.get("verdict") != "pass"]
    dup_children = sorted(c for c, k in Counter(children).items() if c and k > 1)
    retries = {role: sum(((r.get("llm") or {}).get(role) or {}).get("retries", 0) for r in trace)
               for role in ("analyst", "strategist", "coder")}
    first_phase = trace[:start.trace_steps]
    outage1_retries = sum(u.get("retries", 0) for r in first_phase for u in (r.get("llm") or {}).values())
    recorded_calls = sum(u.get("calls", 0) for r in trace for u in (r.get("llm") or {}).values())
    info = soak.info()
    problems = [
        (len(counted) != s.steps, f"{len(counted)} counted steps in trace.jsonl, not the {s.steps} budgeted"),
        (bool(repeated), f"step ids recorded more than once: {', '.join(repeated[:5])}"),
        (gens != list(range(1, len(gens) + 1)), f"the generations are not contiguous: {gens[:3]}…{gens[-3:]}"),
        (bool(ragged), f"generations with missing or extra branches: {ragged[:5]}"),
        ([r["step"] for r in trace] != list(range(len(trace))), "the trace's step numbers are not 0..n-1 in order"),
        (archive_ids != ids, f"the archive's step list ({len(archive_ids)}) is not the trace's ({len(ids)})"),
        (info["steps"] != len(trace), f"run.json counts {info['steps']} steps, the trace holds {len(trace)}"),
        (bool(no_child), f"counted steps without a verified child: {', '.join(no_child[:5])}"),
        (bool(dup_children), f"children made twice: {', '.join(dup_children[:3])}"),
        (start.exit_code != -signal.SIGKILL, f"the first phase ended with exit {start.exit_code}, not the SIGKILL"),
        (outage1_retries == 0, "no model call was retried during the first outage (it did not reach the run)"),
        (any(r["step_id"] in {x["step_id"] for x in first_phase} for r in failed_steps),
         "the first outage, shorter than the retry window, cost a step (provider_failed)"),
        (len({r["generation"] for r in failed_steps}) != 1 or len(failed_steps) != s.branches,
         f"{len(failed_steps)} provider_failed steps, not one generation of {s.branches}"),
        ((after_kill.exit_code, after_kill.status, after_kill.resumable) != (1, "failed", True),
         f"after the long outage the run ended exit {after_kill.exit_code}, status {after_kill.status}, "
         f"resumable {after_kill.resumable} (expected exit 1, failed, resumable)"),
        (not any(f"resume: kernelwright optimize --resume {soak.run_id}" in ln for ln in after_kill.end_lines),
         "the failed run did not print its resume command"),
        (any("None" in ln for p in soak.phases for ln in p.end_lines), "a Python None in the run's end lines"),
        ((after_outage.exit_code, after_outage.status, after_outage.resumable) != (0, "finished", False),
         f"the last resume ended exit {after_outage.exit_code}, status {after_outage.status}"),
        (after_outage.stop_reason != f"iteration budget reached ({s.steps} steps)",
         f"the run stopped for another reason: {after_outage.stop_reason}"),
    ]
    for bad, sentence in problems:
        if bad:
            raise SoakFailure(sentence)
    first, last = soak.samples[0], soak.samples[-1]
    span = max(1, last.steps - first.steps)
    return {
        "trace_records": len(trace), "counted_steps": len(counted), "provider_failed_steps": len(failed_steps),
        "generations": len(gens), "killed_at_records": soak.killed_at,
        "retries": retries, "retries_total": sum(retries.values()), "retries_first_outage": outage1_retries,
        "server_503": soak.model.refused_503, "model_answers": dict(soak.model.answers),
        "model_answers_redone": sum(soak.model.answers.values()) - recorded_calls,
        "second_outage_s": round(soak.outage2_s or 0.0, 1), "wall_s": soak.wall_s,
        "bytes_per_step": round((last.total_bytes - first.total_bytes) / span),
        "checkpoint_bytes_per_step": round((last.checkpoint_bytes - first.checkpoint_bytes) / span),
        "run_dir_bytes": last.total_bytes, "checkpoint_bytes": last.checkpoint_bytes, "parts": last.parts,
    }


# -- output --------------------------------------------------------------------------------------------------


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version(), "machine": platform.machine(), "cpus": str(os.cpu_count())}
    try:
        out["cpu"] = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    for pkg in ("langgraph", "langgraph-checkpoint-sqlite", "langchain-openai", "openai"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        out["commit"] = head + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def report(soak: Soak, figures: dict[str, Any] | None, error: str | None, command: str) -> dict[str, Any]:
    s = soak.s
    print("\nevents:")
    for e in soak.events:
        print(f"  {e}")
    print("\nrun directory after every 10 trace records (records include the outage's uncounted steps):")
    print(f"  {'records':>7}  {'wall s':>7}  {'run dir':>10}  {'checkpoints':>11}  parts")
    for x in soak.samples:
        parts = ", ".join(f"{k} {v / 1e3:.0f} KB" for k, v in x.parts.items() if v >= 1000)
        print(f"  {x.steps:>7}  {x.wall_s:>7.1f}  {_mb(x.total_bytes):>10}  {_mb(x.checkpoint_bytes):>11}  {parts}")
    print("\nphases:")
    for p in soak.phases:
        print(f"  {p.name}: {p.command}")
        runs = f", `kernelwright runs` shows {p.runs_status!r}" if p.runs_status else ""
        print(f"    exit {p.exit_code}, run.json status {p.status!r} (resumable {p.resumable}){runs}; "
              f"{p.trace_steps} trace records; {p.wall_s:.0f} s")
        for ln in p.end_lines:
            print(f"    | {ln}")
        if p.name == "start":
            print(f"    resumed with: kernelwright optimize --resume {soak.run_id} --run-dir {soak.runs}")
    print("\ncandidates were judged by a stand-in evaluator (every kernel passes, untimed, nothing runs); the real "
          "verifier is measured elsewhere (BENCHMARKS.md). The plateau rule was set out of reach (nothing is timed "
          "on the CPU, so it would end the run after 20 steps).")
    rows = [("steps budgeted / counted in trace", f"{s.steps} / {figures['counted_steps']}" if figures else "-")]
    if figures:
        rows += [
            ("trace records (uncounted provider_failed)", f"{figures['trace_records']} ({figures['provider_failed_steps']})"),
            ("step ids repeated / lost", "0 / 0"),
            ("generations, branches", f"{figures['generations']}, {s.branches}"),
            ("first outage (503 then refused)", f"{s.outage_s:g} s, ridden out: {figures['retries_first_outage']} retries"),
            ("SIGKILL", f"at {figures['killed_at_records']} trace records (seed {s.seed}); "
                        f"`runs` then showed {soak.phases[0].runs_status!r}"),
            ("second outage, window", f"{figures['second_outage_s']:g} s until the run failed; window {s.window_s:g} s"),
            ("status after it", f"{soak.phases[1].status}, exit {soak.phases[1].exit_code}, resumable"),
            ("final status", f"{soak.phases[2].status} ({soak.phases[2].stop_reason}), exit {soak.phases[2].exit_code}"),
            ("retries (analyst/strategist/coder)", "{analyst}/{strategist}/{coder}".format(**figures["retries"])
             + f"; server 503s {figures['server_503']}"),
            ("model answers / lost with the kill, redone", f"{sum(figures['model_answers'].values())} "
                                                      f"({figures['model_answers_redone']})"),
            ("run directory / per step", f"{_mb(figures['run_dir_bytes'])} / {figures['bytes_per_step'] / 1e3:.1f} KB"),
            ("checkpoints.sqlite / per step", f"{_mb(figures['checkpoint_bytes'])} / "
                                              f"{figures['checkpoint_bytes_per_step'] / 1e3:.1f} KB"),
            ("wall time", f"{figures['wall_s']:.0f} s"),
        ]
    rows.append(("result", "all checks pass" if error is None else f"FAILED: {error}"))
    width = max(len(a) for a, _ in rows)
    print("\n" + ", ".join(f"{k} {v}" for k, v in versions().items()))
    print(f"\nsoak ({command}):")
    for a, b in rows:
        print(f"  {a.ljust(width)}  {b}")
    return {"command": command, "schedule": asdict(s), "versions": versions(), "run_id": soak.run_id,
            "work_dir": str(soak.work), "events": soak.events, "phases": [asdict(p) for p in soak.phases],
            "samples": [asdict(x) for x in soak.samples], "figures": figures, "error": error}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=200, help="the run's step budget (default 200)")
    ap.add_argument("--branches", type=int, default=2, help="parallel branches per generation (default 2)")
    ap.add_argument("--outage-s", type=float, default=120.0,
                    help="the first outage's length, and the second's 503 half, in seconds (default 120)")
    ap.add_argument("--window-s", type=float, default=None,
                    help="the run's --provider-retry-window in seconds (default: long enough to ride out the first "
                         "outage, min(2*outage+2, outage+62))")
    ap.add_argument("--seed", type=int, default=None, help="picks the SIGKILL's step (default: random, printed)")
    ap.add_argument("--work-dir", type=Path, default=None, help="where the run and the logs go (default: a new "
                                                                 "temporary folder, kept)")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10 ** 6)
    command = "python bench/soak.py " + " ".join(sys.argv[1:])
    try:
        if args.steps < 1 or args.branches < 1 or args.outage_s <= 0:
            raise SoakFailure("--steps, --branches and --outage-s must be positive")
        schedule = Schedule.make(args.steps, args.branches, args.outage_s, args.window_s, seed)
    except SoakFailure as e:
        print(f"soak: {e}", file=sys.stderr)
        return 2
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="kw-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    soak = Soak(schedule, work)
    print(f"soak: {schedule.steps} steps, {schedule.branches} branches; first outage {schedule.outage_s:g} s at "
          f"{schedule.outage1_at} steps; SIGKILL at {schedule.kill_at}; second outage at {schedule.outage2_at} until "
          f"the run fails (retry window {schedule.window_s:g} s); model at {soak.provider.url}; work in {work}",
          flush=True)
    figures, error = None, None
    try:
        soak.run()
        figures = check(soak)
    except SoakFailure as e:
        error = str(e)
    finally:
        soak.stop()
    out = report(soak, figures, error, command)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    if error:
        print(f"soak failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
