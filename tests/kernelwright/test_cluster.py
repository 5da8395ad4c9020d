"""Evaluation on a Ray cluster (`--cluster`), on a real local cluster started for this module on the CPU:
`optimize` and `bench` spread over several actors, an actor SIGKILLed in the middle of an evaluation loses
no step and no problem, a hung actor is given up on within its limit, no secret reaches an actor, and bad
input is one sentence. Skipped only where Ray is not installed (`pip install kernelwright[ray]`; `make test`
installs it)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

ray = pytest.importorskip("ray")

from kernelwright.cli import app  # noqa: E402
from kernelwright.evaluators import EvalPolicy, load_problem  # noqa: E402
from kernelwright.evaluators.cluster import Slot, SlotLost, connect  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kb_suite import HONEST, write_suite  # noqa: E402
from proctree import descendants, signal_all  # noqa: E402

PLANTED = "sk-planted-on-the-node-0123456789"
CPUS = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CLIENT_PORT: list[int] = []


HEAD: list[int] = []
"""the pid of this module's `ray start --block`, whose process tree is the cluster"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A one-node Ray cluster started the way an operator would (`ray start --head`), carelessly: its
    environment holds a key, which its actors must drop. Yields its GCS address; Ray Client listens on
    CLIENT_PORT[0]. Only this cluster's own processes are ever stopped (never `ray stop`, which stops every
    cluster of the machine)."""
    port, client = _free_port(), _free_port()
    CLIENT_PORT[:] = [client]
    temp = tempfile.mkdtemp(prefix="kwray")  # short: Ray's socket paths must fit in 107 characters
    ray_bin = str(Path(sys.executable).parent / "ray")
    # its own HOME: a token in ~/.ray would turn Ray's token authentication on, which the driver would lack
    env = {"PATH": os.environ["PATH"], "HOME": temp, "RAY_USAGE_STATS_ENABLED": "0",
           "PLANTED_API_KEY": PLANTED, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    head = subprocess.Popen([ray_bin, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
                             f"--num-cpus={CPUS}", "--num-gpus=0", "--include-dashboard=false",
                             f"--ray-client-server-port={client}", "--disable-usage-stats", f"--temp-dir={temp}"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    HEAD[:] = [head.pid]
    try:
        deadline = time.monotonic() + 180
        while True:  # up once its GCS and its Ray Client server answer
            try:
                for p in (port, client):
                    socket.create_connection(("127.0.0.1", p), timeout=1).close()
                break
            except OSError:
                assert head.poll() is None and time.monotonic() < deadline, "the Ray cluster did not start"
                time.sleep(0.3)
        yield f"127.0.0.1:{port}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        procs = descendants(head.pid)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            signal_all(procs, sig)
            time.sleep(2)
        head.wait(timeout=30)
        shutil.rmtree(temp, ignore_errors=True)


def _actor_pids(method: str = "") -> list[int]:
    """This cluster's evaluation actors (Ray titles them `ray::EvalActor.<method>` while a method runs)."""
    want = f"ray::EvalActor{'.' + method if method else ''}".encode()
    pids = []
    for pid in descendants(HEAD[0]):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmd.startswith(want):
            pids.append(pid)
    return pids


def _gone(within_s: float = 30.0) -> bool:
    """No evaluation actor is left (killing one takes Ray a moment)."""
    deadline = time.monotonic() + within_s
    while _actor_pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    return not _actor_pids()


class Killer(threading.Thread):
    """SIGKILLs the first actor seen in the middle of an `evaluate` call, once."""

    def __init__(self, after: int = 0) -> None:
        super().__init__(daemon=True)
        self.after = after  # let this many evaluate calls be seen first, so the kill falls mid-run
        self.killed: int | None = None
        self.alive: set[int] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        seen: set[int] = set()
        while not self.stop.is_set():
            busy = _actor_pids("evaluate")
            if busy and len(seen) >= self.after:
                self.alive = set(_actor_pids())  # every actor there was when one was killed
                os.kill(busy[0], signal.SIGKILL)
                self.killed = busy[0]
                return
            seen.update(busy)
            time.sleep(0.02)


def _evals(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "evals").glob("*.json"))]


def test_bad_cluster_input_is_one_sentence(cluster: str, tmp_path: Path) -> None:
    base = [str(Path(sys.executable).parent / "kernelwright"), "optimize", str(HONEST / "relu_problem.py"), "--seed-kernel", str(HONEST / "relu_candidate.py"),
            "--iterations", "1", "--run-dir", str(tmp_path / "runs")]
    dead = _free_port()
    for extra, words in ((["--cluster", f"127.0.0.1:{dead}"], f"no Ray cluster answers at 127.0.0.1:{dead}"),
                         (["--cluster", "somewhere"], "use ray (the running cluster)"),
                         (["--cluster", cluster, "--device", "cuda"], "has no GPU"),
                         (["--cluster", cluster, "--device", "cpu", "--actors", "99"], f"has {CPUS} CPU(s)"),
                         (["--cluster", cluster, "--device", "cuda:1"], "give cuda (one GPU per actor) or cpu"),
                         (["--actors", "2"], "actors (the number of evaluation actors) need a Ray cluster")):
        t0 = time.monotonic()
        r = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and words in r.stdout + r.stderr, (extra, r.stdout, r.stderr)
        assert "Traceback" not in r.stdout + r.stderr and time.monotonic() - t0 < 60
    assert not list((tmp_path / "runs").glob("*")) if (tmp_path / "runs").exists() else True  # no run was left


def test_an_actor_drops_the_nodes_secrets_and_never_gets_the_drivers(cluster: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-driver-0123456789")
    slot = connect(cluster).slot("cpu", name="secrets")
    try:
        hello = slot.call("hello")
    finally:
        slot.close()
    assert hello["removed"] == ["PLANTED_API_KEY"]  # the node's environment had it; the actor dropped it
    assert hello["secret_names"] == []  # and nothing secret-looking is left, the driver's key never came
    assert hello["kernelwright"] == __import__("kernelwright.evaluators.cluster", fromlist=["version"]).version()


def test_closing_a_slot_does_not_wait_for_its_actor_to_be_placed(cluster: str) -> None:
    """A run that ends while an actor waits for a free GPU ends at once; the waiting call gives up."""
    slot = connect(cluster).slot("cuda", name="unplaceable")  # this cluster has no GPU: the start waits
    slot.placement_timeout_s = 20
    raised: list[BaseException] = []

    def call() -> None:
        try:
            slot.call("hello")
        except BaseException as e:  # noqa: BLE001 - recorded for the assertion
            raised.append(e)

    waiting = threading.Thread(target=call, daemon=True)
    waiting.start()
    time.sleep(2)
    t0 = time.monotonic()
    slot.close()
    assert time.monotonic() - t0 < 5, "close waited for the placement"
    waiting.join(40)
    assert not waiting.is_alive() and len(raised) == 1 and isinstance(raised[0], SlotLost), raised


@pytest.mark.timeout(600)
def test_optimize_over_two_actors_loses_no_step_when_one_is_killed(cluster: str, tmp_path: Path) -> None:
    killer = Killer(after=2)
    killer.start()
    runs = tmp_path / "runs"
    r = CliRunner().invoke(app, ["optimize", str(HONEST / "relu_problem.py"), "--seed-kernel",
                                 str(HONEST / "relu_candidate.py"), "--iterations", "6", "--branches", "2",
                                 "--trials", "1", "--cluster", cluster, "--device", "cpu", "--actors", "2",
                                 "--run-dir", str(runs)])
    killer.stop.set()
    assert r.exit_code == 0, r.output
    assert killer.killed is not None, "no actor was seen mid-evaluation"
    (run_dir,) = list(runs.iterdir())
    steps = [json.loads(x) for x in (run_dir / "trace.jsonl").read_text().splitlines()]
    assert len(steps) == 6 and len({s["step_id"] for s in steps}) == 6  # every step, none twice
    # every child was judged (the builtin policy may run out of moves on this one-knob kernel: no child then)
    judged = [s for s in steps if s["child"]]
    assert len(judged) >= 4 and all(s["verdict"] == "pass" and not s["evaluator_failure"] for s in judged), \
        json.dumps([s for s in steps if s["verdict"] != "pass"])[:3000]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["config"]["settings"]["cluster"] == cluster
    pids = {e["versions"]["ray_actor_pid"] for e in _evals(run_dir)}
    slots = {e["versions"]["ray_slot"].rsplit("/", 1)[1] for e in _evals(run_dir)}
    assert slots == {"ray:0", "ray:1"}  # both actors judged
    assert {int(p) for p in pids} - killer.alive  # a fresh actor replaced the killed one, and judged
    assert all(e["verdict"] != "error" for e in _evals(run_dir))
    assert _gone()  # the run's actors are gone with it


@pytest.mark.timeout(600)
def test_a_stopped_run_resumes_elsewhere_when_its_cluster_is_gone(cluster: str, tmp_path: Path) -> None:
    """An overnight run whose cluster went away: resuming it as it was says so in one sentence and changes
    nothing; `--device cpu` finishes it here, `--cluster` on another cluster; run.json says where it went."""
    from kernelwright import api

    runs = tmp_path / "runs"
    config = api.RunConfig(device="cpu", cluster=cluster, actors=1, branches=1, iterations=3, trials=1)
    with api.start_run(HONEST / "relu_problem.py", seed_kernel=HONEST / "relu_candidate.py", config=config,
                       runs_dir=runs) as handle:
        for _ in handle.steps():
            handle.request_stop()
        run_id = handle.id
    (run_dir,) = list(runs.iterdir())
    steps_before = (run_dir / "trace.jsonl").read_text().splitlines()
    assert 1 <= len(steps_before) < 3
    info = json.loads((run_dir / "run.json").read_text())
    dead = f"127.0.0.1:{_free_port()}"
    info["config"]["settings"]["cluster"] = dead  # the cluster it ran on is gone
    (run_dir / "run.json").write_text(json.dumps(info))
    saved = (run_dir / "run.json").read_text()

    def resume(*extra: str) -> object:
        return CliRunner().invoke(app, ["optimize", "--resume", run_id, "--run-dir", str(runs), *extra])

    r = resume()
    assert r.exit_code == 2 and f"it evaluated on the Ray cluster {dead}" in r.output, r.output
    assert "resume it elsewhere with --cluster ADDRESS, or here with --device" in r.output
    r = resume("--actors", "2", "--device", "cpu")
    assert r.exit_code == 2 and "actors (the number of evaluation actors) need a Ray cluster" in r.output, r.output
    assert (run_dir / "run.json").read_text() == saved  # a refused resume changes nothing

    r = resume("--cluster", cluster, "--device", "cpu", "--actors", "1")  # another cluster (here: the live one)
    assert r.exit_code == 0, r.output
    context = json.loads((run_dir / "run.json").read_text())["config"]["settings"]
    assert context["cluster"] == cluster and context["device"] == "cpu" and context["actors"] == 1
    steps = [json.loads(x) for x in (run_dir / "trace.jsonl").read_text().splitlines()]
    assert len(steps) == 3 and len({s["step_id"] for s in steps}) == 3  # it went on, nothing lost or repeated

    info = json.loads((run_dir / "run.json").read_text())
    info["config"]["settings"]["cluster"] = dead
    (run_dir / "run.json").write_text(json.dumps(info))
    r = resume("--device", "cpu")  # and here, with no cluster at all
    assert r.exit_code == 0, r.output
    context = json.loads((run_dir / "run.json").read_text())["config"]["settings"]
    assert context["cluster"] == "" and context["device"] == "cpu" and context["actors"] == 0


def _suite(tmp_path: Path) -> tuple[Path, Path]:
    return write_suite(tmp_path, {"level1/5_ReLU_again.py": (HONEST / "relu_problem.py", HONEST / "relu_candidate.py")})


@pytest.mark.timeout(600)
def test_bench_over_two_actors_gives_the_local_figures_with_an_actor_killed(cluster: str, tmp_path: Path) -> None:
    s, k = _suite(tmp_path)
    out = tmp_path / "out"
    killer = Killer(after=1)
    killer.start()
    r = CliRunner().invoke(app, ["bench", str(s), "--kernels", str(k), "--cluster", cluster, "--device", "cpu",
                                 "--actors", "2", "--trials", "1", "--out", str(out)])
    killer.stop.set()
    assert r.exit_code == 0, r.output
    assert killer.killed is not None, "no actor was seen mid-evaluation"
    rows = {json.loads(x)["problem"]: json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()}
    assert len(rows) == 5  # every problem once
    got = {p: (row["verdict"], row["reason"]) for p, row in rows.items()}
    assert got == {"level1/1_ReLU.py": ("pass", "ok"), "level1/2_ReLU_signs.py": ("fail", "wrong_output"),
                   "level1/3_Softmax.py": ("fail", "forbidden_op"), "level1/4_RowSum.py": ("missing", "missing"),
                   "level1/5_ReLU_again.py": ("pass", "ok")}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["fast_p"]["eager"]["0"] == 2 / 5 and summary["correct"] == 2
    actors = {row["actor"] for row in rows.values() if row.get("actor")}
    assert len(actors - {f"{socket.gethostname()}:{killer.killed}"}) >= 2, actors  # spread over both slots
    assert _gone()


@pytest.mark.timeout(600)
def test_bench_optimize_gives_each_problems_run_an_actor(cluster: str, tmp_path: Path) -> None:
    s, k = _suite(tmp_path)
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["bench", str(s), "--optimize", "--seed-kernels", str(k), "--problems", "1_*,5_*",
                                 "--iterations", "1", "--branches", "1", "--trials", "1", "--cluster", cluster,
                                 "--device", "cpu", "--actors", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [row["verdict"] for row in rows] == ["pass", "pass"]
    for row in rows:
        cfg = json.loads((out / "runs" / row["run"] / "run.json").read_text())["config"]["settings"]
        assert (cfg["cluster"], cfg["device"], cfg["actors"]) == (cluster, "cpu", 1)
        assert all("ray_actor_pid" in e["versions"] for e in _evals(out / "runs" / row["run"]))


def test_an_actor_that_does_not_answer_is_given_up_on_not_waited_for(cluster: str) -> None:
    problem = load_problem(HONEST / "relu_problem.py")
    slot = Slot(connect(cluster), "cpu", name="hung", retries=1, call_timeout_s=0.5)
    t0 = time.monotonic()
    try:
        # building the evaluator in the actor takes longer than 0.5 s on the CPU: to the driver, a hang
        result = slot.evaluator(problem, EvalPolicy(trials=1)).evaluate((HONEST / "relu_candidate.py").read_text())
    finally:
        slot.close()
    assert result.verdict == "error" and result.reason == "evaluator_error"
    assert "no answer within 0.5 s" in result.detail, result.detail
    assert len(slot.lost) == 2 and time.monotonic() - t0 < 120


@pytest.mark.timeout(600)
def test_bench_through_ray_client_from_another_process(cluster: str, tmp_path: Path) -> None:
    """`ray://HOST:PORT`, as from a laptop to a remote cluster: a fresh process with nothing of Ray set up."""
    s, k = _suite(tmp_path)
    out = tmp_path / "out"
    r = subprocess.run([str(Path(sys.executable).parent / "kernelwright"), "bench", str(s), "--kernels", str(k),
                        "--problems", "1_*,2_*", "--cluster", f"ray://127.0.0.1:{CLIENT_PORT[0]}", "--device", "cpu",
                        "--actors", "1", "--trials", "1", "--out", str(out)],
                       capture_output=True, text=True, timeout=500)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {json.loads(x)["problem"]: json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()}
    assert {p: row["verdict"] for p, row in rows.items()} == {"level1/1_ReLU.py": "pass", "level1/2_ReLU_signs.py": "fail"}
    assert all(row["actor"] for row in rows.values())
    assert "Traceback" not in r.stdout + r.stderr
