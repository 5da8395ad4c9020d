"""Beyond one host: a Ray cluster of two nodes on this machine (`ray.cluster_utils.Cluster`, Ray's own way to
test several nodes on one), one CPU each, so that `optimize --actors 2` puts one evaluation actor on each node.
The second node is lost in the middle of an evaluation (its raylet and its workers SIGKILLed), and a new node
joins, as an autoscaler or an operator would bring one: the run loses no step, every child is judged, and the
lost actor's place is taken by an actor on the new node."""

from __future__ import annotations

import json
import sys
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402


sys.path.insert(0, str(Path(__file__).resolve().parent))
from kb_suite import HONEST  # noqa: E402
from proctree import descendants, signal_all  # noqa: E402


def _evaluating(node: Any) -> list[int]:
    """The evaluation actors of `node` in the middle of an `evaluate` call."""
    pids = []
    for pid in descendants(_raylet(node)):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::EvalActor.evaluate"):
                pids.append(pid)
        except OSError:
            continue
    return pids


@pytest.fixture()
def two_nodes() -> Iterator[Cluster]:
    if ray.is_initialized():
        ray.shutdown()  # one cluster per process: another module's may still be connected
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0,
                                                            "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, num_gpus=0)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


def _raylet(node: Any) -> int:
    return node.all_processes["raylet"][0].process.pid


def _kill(cluster: Cluster, node: Any) -> None:
    """The node lost: its raylet and every process under it SIGKILLed, and the cluster told."""
    signal_all(descendants(_raylet(node)))
    cluster.remove_node(node, allow_graceful=False)


def _lose(cluster: Cluster, node: Any) -> Any:
    """`_kill` the node, then start a new node in its place."""
    _kill(cluster, node)
    return cluster.add_node(num_cpus=1, num_gpus=0)  # here: Ray sets signal handlers, the main thread's job


@pytest.mark.timeout(600)
def test_a_lost_node_loses_no_step_and_a_new_node_takes_its_place(two_nodes: Cluster, tmp_path: Path) -> None:
    head = two_nodes.head_node
    (worker,) = [n for n in two_nodes.worker_nodes]
    runs, log = tmp_path / "runs", tmp_path / "driver.log"
    driver = subprocess.Popen(
        [str(Path(sys.executable).parent / "kernelwright"), "optimize", str(HONEST / "relu_problem.py"),
         "--seed-kernel", str(HONEST / "relu_candidate.py"), "--iterations", "6", "--branches", "2", "--trials", "1",
         "--cluster", two_nodes.address, "--device", "cpu", "--actors", "2", "--run-dir", str(runs)],
        stdout=log.open("w"), stderr=subprocess.STDOUT)
    lost_pid, new_node = None, None
    try:
        while driver.poll() is None and lost_pid is None:  # the worker node's first evaluation is hit
            if _evaluating(worker):
                time.sleep(0.3)  # well inside it
                busy = _evaluating(worker)
                if busy:
                    lost_pid = busy[0]
                    new_node = _lose(two_nodes, worker)
            time.sleep(0.02)
        driver.wait(timeout=480)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert lost_pid is not None and new_node is not None, "no actor of the second node was seen mid-evaluation"
    said = log.read_text()
    assert driver.returncode == 0, said[-3000:]
    assert f"(node {worker.node_id[:8]}, pid {lost_pid}) was lost" in said and "trying a fresh actor" in said, said
    (run_dir,) = list(runs.iterdir())
    steps = [json.loads(x) for x in (run_dir / "trace.jsonl").read_text().splitlines()]
    assert len(steps) == 6 and len({s["step_id"] for s in steps}) == 6  # every step, none twice
    judged = [s for s in steps if s["child"]]
    assert len(judged) >= 4 and all(s["verdict"] == "pass" and not s["evaluator_failure"] for s in judged), \
        json.dumps([s for s in steps if s["verdict"] != "pass"])[:3000]
    evals = [json.loads(p.read_text()) for p in sorted((run_dir / "evals").glob("*.json"))]
    assert all(e["verdict"] != "error" for e in evals)
    nodes = {e["versions"]["ray_node"] for e in evals}
    # the head's actor judged, and so did the actor on the node that came in place of the lost one
    assert {head.node_id, new_node.node_id} <= nodes, (nodes, head.node_id, new_node.node_id)


@pytest.mark.timeout(600)
def test_a_slot_with_no_room_left_has_its_candidates_judged_by_the_other_actors(two_nodes: Cluster,
                                                                                 tmp_path: Path) -> None:
    """A node lost and none in its place: its slot's next evaluation waits out the placement timeout once and is
    then judged by the other actor; later ones go straight to the other actor, without waiting again."""
    from kernelwright.tools.evaluation import Evaluations
    from kernelwright.tools.runstore import RunStore

    problem, kernel = HONEST / "relu_problem.py", (HONEST / "relu_candidate.py").read_text()
    run = RunStore(tmp_path).create(str(problem), problem.read_text())
    ev = Evaluations(run, trials=1, cluster=two_nodes.address, kind="cpu")
    try:
        first = {d: ev.evaluate(kernel + f"\n# {d}\n", d)[1] for d in ("ray:0", "ray:1")}
        assert all(r.verdict == "pass" for r in first.values()), {d: r.detail for d, r in first.items()}
        (worker,) = two_nodes.worker_nodes
        on_worker = [d for d, r in first.items() if r.versions["ray_node"] == worker.node_id]
        assert len(on_worker) == 1, {d: r.versions for d, r in first.items()}  # one actor on each node
        lost, other = on_worker[0], ({"ray:0", "ray:1"} - set(on_worker)).pop()
        for d in ("ray:0", "ray:1"):
            ev.evaluator(d).slot.placement_timeout_s = 5  # type: ignore[union-attr]
        _kill(two_nodes, worker)

        h, again = ev.evaluate(kernel + "\n# after the loss\n", lost)
        assert again.verdict == "pass", again.detail
        assert again.versions["judged_for"] == lost and again.versions["ray_slot"].endswith(other)
        assert again.versions["ray_node"] == two_nodes.head_node.node_id
        assert ev.cached(h) is not None  # a real verdict, kept like any other
        slot = ev.evaluator(lost).slot  # type: ignore[union-attr]
        at = slot.unplaceable_at
        assert at is not None and "was lost" in slot.lost[-1]

        t0 = time.monotonic()
        _, later = ev.evaluate(kernel + "\n# later\n", lost)
        assert later.verdict == "pass" and later.versions["judged_for"] == lost
        assert slot.unplaceable_at == at, "the slot with no room was tried again at once"
        assert time.monotonic() - t0 < 60
    finally:
        ev.close()
