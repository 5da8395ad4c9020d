"""`kernelwright mcp`: an MCP server (the official `mcp` SDK) through which a chat client drives runs.

Every tool returns within a few seconds: runs and evaluations are jobs on threads inside the server. A
chat client's own model can drive a run with `review: "proposals"` and play the strategist and the coder
through `review(..., decision="respond")`, so no API key is needed inside kernelwright. Reviews, steering
and stop requests go through the run's review desk (files in its run directory), so a run the server
drives can also be reviewed from `kernelwright chat --attach`, and the other way round.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwright import api
from kernelwright.api import UsageError
from kernelwright.tools.review import who

log = logging.getLogger(__name__)

INSTRUCTIONS = """kernelwright makes a GPU kernel faster with an evolutionary loop (analyst -> strategist ->
coder -> verifier -> archive) judged by a verifier nothing can fool. Start a run with start_run (review:
"proposals" pauses each branch after its strategist); poll run_status and pending_review; answer with
review (approve, edit, reject with a message, or respond with your own proposal or child kernel); steer
with steer; read get_trace and best_kernel; stop with stop_run. evaluate judges one candidate as a job:
poll job_result."""


@dataclass
class Job:
    id: str
    kind: str
    thread: threading.Thread | None = None
    status: str = "running"
    result: Any = None
    error: str | None = None
    started: float = field(default_factory=time.time)
    handle: api.RunHandle | None = None


class Server:
    """The jobs of one server process, and the tools over them."""

    def __init__(self, runs_dir: str | Path = "runs") -> None:
        self.runs_dir = Path(runs_dir)
        self.jobs: dict[str, Job] = {}
        self.runs: dict[str, Job] = {}
        self.lock = threading.Lock()
        self.by = who("mcp")

    # -- runs ---------------------------------------------------------------------------------------------

    def _drive(self, job: Job) -> None:
        assert job.handle is not None
        try:
            with job.handle:
                info = job.handle.run_to_end("mcp")
            job.status, job.result = "finished", info.model_dump(mode="json")
        except Exception as e:  # noqa: BLE001 - a run's crash is reported through run_status, not lost
            log.error("run %s failed:\n%s", job.id, traceback.format_exc())
            job.status, job.error = "failed", f"{type(e).__name__}: {e}"

    def _launch(self, handle: api.RunHandle) -> dict[str, Any]:
        job = Job(id=handle.id, kind="run", handle=handle)
        job.thread = threading.Thread(target=self._drive, args=(job,), name=f"run-{handle.id}", daemon=True)
        with self.lock:
            self.runs[handle.id] = job
        job.thread.start()
        return {"run_id": handle.id, "run_dir": str(handle.path)}

    def start_run(self, problem: str, seed_kernel: str | None = None, model: str = "builtin", iterations: int = 8,
                  branches: int = 2, device: str | None = None, review: str = "proposals",
                  base_url: str | None = None, precision: str | None = None, trials: int = 5,
                  cluster: str | None = None, actors: int | None = None) -> dict[str, Any]:
        from kernelwright.agents.review import REVIEW_MODES

        if review not in REVIEW_MODES:
            raise UsageError(f"review {review!r}: use one of {', '.join(REVIEW_MODES)}")
        config = api.RunConfig(device=device or "", cluster=cluster or "", actors=actors or 0, precision=precision,
                               branches=branches, iterations=iterations, trials=trials, model=model,
                               base_url=base_url, review=review)
        return self._launch(api.start_run(problem, seed_kernel=seed_kernel, config=config, runs_dir=self.runs_dir))

    def resume_run(self, run_id: str, device: str | None = None, cluster: str | None = None,
                   actors: int | None = None) -> dict[str, Any]:
        with self.lock:
            live = self.runs.get(run_id)
        if live is not None and live.status == "running":
            raise UsageError(f"run {run_id} is already running in this server")
        if api.driven_elsewhere(run_id, runs_dir=self.runs_dir):
            raise UsageError(f"run {run_id} is driven by another live process; review it instead")
        return self._launch(api.resume_run(run_id, runs_dir=self.runs_dir, device=device, cluster=cluster,
                                           actors=actors))

    def run_status(self, run_id: str) -> dict[str, Any]:
        info = api.open_run(run_id, self.runs_dir).info()
        job = self.runs.get(run_id)
        waiting = api.pending_reviews(run_id, runs_dir=self.runs_dir)
        return {"run_id": run_id, "status": info.status, "stop_reason": info.stop_reason, "steps": info.steps,
                "best_kernel": info.best_kernel, "best_speedup_vs_eager": info.best_speedup,
                "pending_reviews": [p.step_id for p in waiting],
                "driven_here": bool(job and job.status == "running"),
                "error": job.error if job else None}

    def pending_review(self, run_id: str) -> dict[str, Any] | None:
        waiting = api.pending_reviews(run_id, runs_dir=self.runs_dir)
        if not waiting:
            return None
        p = waiting[0]
        out = p.model_dump()
        out["parent_source"] = api.open_run(run_id, self.runs_dir).run.kernel(p.parent) if p.parent else None
        out["also_waiting"] = [q.step_id for q in waiting[1:]]
        return out

    def review(self, run_id: str, decision: str, proposal: dict[str, Any] | str | None = None,
               kernel: str | None = None, message: str | None = None, step_id: str | None = None) -> dict[str, Any]:
        p = api.review(run_id, decision, proposal=proposal, kernel=kernel, message=message, step_id=step_id,
                       by=self.by, runs_dir=self.runs_dir)
        return {"run_id": run_id, "step_id": p.step_id, "decision": decision, "recorded": True}

    def steer(self, run_id: str, text: str = "", kind: str = "note") -> dict[str, Any]:
        e = api.steer(run_id, kind, text, by=self.by, runs_dir=self.runs_dir)
        return {"run_id": run_id, **e.model_dump(), "in_force": api.steering(run_id, self.runs_dir).model_dump()}

    def stop_run(self, run_id: str, wait_s: float = 5.0) -> dict[str, Any]:
        api.request_stop(run_id, by=self.by, runs_dir=self.runs_dir)
        job = self.runs.get(run_id)
        if job is not None and job.thread is not None:
            job.handle.request_stop() if job.handle else None
            job.thread.join(timeout=wait_s)
        info = api.open_run(run_id, self.runs_dir).info()
        ended = job is None or job.thread is None or not job.thread.is_alive()
        return {"run_id": run_id, "stopped": ended, "status": info.status, "stop_reason": info.stop_reason,
                "note": None if ended else "the step in flight finishes first; poll run_status"}

    def list_runs(self) -> list[dict[str, Any]]:
        return [{"run_id": i.id, "problem": i.problem, "status": i.status, "steps": i.steps,
                 "best_speedup_vs_eager": i.best_speedup, "created": i.created} for i in api.list_runs(self.runs_dir)]

    def get_trace(self, run_id: str, since: int = 0) -> list[dict[str, Any]]:
        return [s.model_dump(mode="json") for s in api.open_run(run_id, self.runs_dir).steps()[since:]]

    def best_kernel(self, run_id: str) -> dict[str, Any] | None:
        b = api.open_run(run_id, self.runs_dir).best()
        if b is None:
            return None
        t = b.result.timing if b.result else None
        return {"hash": b.hash, "path": str(b.path), "source": b.source,
                "verdict": b.result.verdict if b.result else None,
                "median_ms": t.median_ms if t else None, "speedup_vs_eager": t.speedup_vs_eager if t else None,
                "speedup_vs_compile": t.speedup_vs_compile if t else None}

    # -- evaluations as jobs ------------------------------------------------------------------------------

    def evaluate(self, problem: str, candidate: str, device: str | None = None, trials: int = 5) -> dict[str, Any]:
        job = Job(id="eval-" + uuid.uuid4().hex[:8], kind="evaluate")

        def work() -> None:
            try:
                r = api.evaluate(problem, candidate, device=device, trials=trials)
                job.status, job.result = "finished", r.model_dump(mode="json")
            except UsageError as e:
                job.status, job.error = "failed", str(e)
            except Exception as e:  # noqa: BLE001
                log.error("evaluation %s failed:\n%s", job.id, traceback.format_exc())
                job.status, job.error = "failed", f"{type(e).__name__}: {e}"

        job.thread = threading.Thread(target=work, name=job.id, daemon=True)
        with self.lock:
            self.jobs[job.id] = job
        job.thread.start()
        return {"job_id": job.id}

    def job_result(self, job_id: str) -> dict[str, Any]:
        job = self.jobs.get(job_id)
        if job is None:
            raise UsageError(f"no job {job_id} in this server")
        return {"job_id": job_id, "status": job.status, "result": job.result, "error": job.error,
                "elapsed_s": round(time.time() - job.started, 1)}

    def close(self) -> None:
        for job in list(self.runs.values()):
            if job.handle is not None and job.thread is not None and job.thread.is_alive():
                job.handle.request_stop()


def build(runs_dir: str | Path = "runs") -> Any:
    """The MCPServer with kernelwright's tools (each raises a ToolError with one sentence on bad input)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    s = Server(runs_dir)
    app = MCPServer("kernelwright", instructions=INSTRUCTIONS)
    app.kernelwright = s  # type: ignore[attr-defined]

    def tool(fn: Any) -> Any:
        method = getattr(s, fn.__name__)

        def call(**kw: Any) -> Any:
            try:
                return method(**kw)
            except UsageError as e:
                raise ToolError(str(e)) from None

        call.__name__, call.__doc__ = fn.__name__, fn.__doc__
        call.__annotations__ = fn.__annotations__
        call.__signature__ = __import__("inspect").signature(fn)  # type: ignore[attr-defined]
        app.tool()(call)
        return fn

    @tool
    def start_run(problem: str, seed_kernel: str | None = None, model: str = "builtin", iterations: int = 8,
                  branches: int = 2, device: str | None = None, review: str = "proposals",
                  cluster: str | None = None, actors: int | None = None) -> dict[str, Any]:
        """Start an optimization run of a problem file (a KernelBench-style Model with get_inputs) from a seed
        kernel file; returns {"run_id"} at once while the run goes on in the server. review "proposals" pauses
        each branch after its strategist until `review` decides; "none" runs unattended. model: builtin (no
        model) or provider:model. device: cpu, cuda, cuda:N or cuda:0,cuda:1 (branches spread over the GPUs).
        cluster: evaluate on a running Ray cluster (ray, ray://HOST:PORT or HOST:PORT), with `actors` evaluation
        actors (default one per GPU) and device cuda or cpu for their kind."""

    @tool
    def resume_run(run_id: str, device: str | None = None, cluster: str | None = None,
                   actors: int | None = None) -> dict[str, Any]:
        """Continue a stopped or interrupted run (or one whose driver died) from its last checkpoint, where it
        evaluated before; device alone moves it to this server's devices, cluster (with actors) to a Ray
        cluster."""

    @tool
    def run_status(run_id: str) -> dict[str, Any]:
        """Status, steps so far, best kernel and speedup, and which steps wait for a review."""

    @tool
    def pending_review(run_id: str) -> dict[str, Any] | None:
        """The oldest step waiting for a review (step_id, diagnosis, proposal, allowed_decisions, the parent's
        source), or null when none waits."""

    @tool
    def review(run_id: str, decision: str, proposal: dict[str, Any] | str | None = None, kernel: str | None = None,
               message: str | None = None, step_id: str | None = None) -> dict[str, Any]:
        """Decide a waiting step: approve; edit (proposal: the changed fields, e.g. {"what": ...}); reject
        (message: why; the strategist is told); respond (your own proposal, or kernel: the child kernel's full
        source, which is verified as the step's child). step_id defaults to the oldest waiting step."""

    @tool
    def steer(run_id: str, text: str = "", kind: str = "note") -> dict[str, Any]:
        """Steer the run from the next step on. kind note: a standing instruction to the strategist (text);
        pin: every branch starts from this kernel (text: its hash); ban: no proposal of this category (text:
        tiling, warps, pipelining, ...); unpin, unban, clear (drop the notes)."""

    @tool
    def stop_run(run_id: str) -> dict[str, Any]:
        """Stop the run after the step in flight (checkpointed; resume_run continues it)."""

    @tool
    def list_runs() -> list[dict[str, Any]]:
        """Every run in the server's run directory, newest last."""

    @tool
    def get_trace(run_id: str, since: int = 0) -> list[dict[str, Any]]:
        """The run's step records (from step `since`): diagnosis, proposal, review, diff, verdict, timing and
        the archive's decision (schema: docs/trace.md)."""

    @tool
    def best_kernel(run_id: str) -> dict[str, Any] | None:
        """The run's best kernel: hash, path, source and measured numbers (null before the seed is judged)."""

    @tool
    def evaluate(problem: str, candidate: str, device: str | None = None, trials: int = 5) -> dict[str, Any]:
        """Judge one candidate (a file path or its source) against a problem file, as a job: returns
        {"job_id"}; poll job_result."""

    @tool
    def job_result(job_id: str) -> dict[str, Any]:
        """A job's status and, once finished, its result (an evaluation's verdict, timing and checks)."""

    return app


def serve(transport: str = "stdio", runs_dir: str | Path = "runs", host: str = "127.0.0.1", port: int = 8765) -> None:
    app = build(runs_dir)
    try:
        if transport == "stdio":
            app.run("stdio")
        else:
            app.run("streamable-http", host=host, port=port)
    finally:
        app.kernelwright.close()
