"""GPU locks are named by the GPU's UUID: a process that sees a GPU under another index (CUDA_VISIBLE_DEVICES,
as each Ray actor does) takes the same lock as one that sees every GPU. `make test-gpu`; skipped without CUDA."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from kernelwright.evaluators.locks import gpu_key, lock_paths

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_every_gpu_is_locked_by_its_uuid_whatever_index_a_process_knows_it_by() -> None:
    n = torch.cuda.device_count()
    keys = [gpu_key(torch.device("cuda", i)) for i in range(n)]
    assert len(set(keys)) == n and all(k == f"cuda-{torch.cuda.get_device_properties(i).uuid}" for i, k in enumerate(keys))
    # this process's own view may already be a subset (CUDA_VISIBLE_DEVICES=3 on a shared host): cuda:i is the
    # i-th GPU of that list, not physical GPU i
    visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()] or \
        [str(i) for i in range(n)]
    for i in range(n):  # the same GPU seen alone, as cuda:0, by another process
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible[i]}
        out = subprocess.run([sys.executable, "-c", "import torch; from kernelwright.evaluators.locks import lock_paths;"
                              "print(lock_paths(torch.device('cuda', 0))[0])"],
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == lock_paths(torch.device("cuda", i))[0]


@pytest.mark.timeout(900)
def test_many_evaluations_at_once_on_one_gpu_all_finish() -> None:
    """Six threads judging on one evaluator and one GPU at once, as six branches of a generation do: every
    evaluation ends (a lock-order inversion between the GPU locks and the evaluator's own lock once hung four)."""
    import threading
    from pathlib import Path

    from kernelwright.evaluators import EvalPolicy, Evaluator, load_problem

    here = Path(__file__).resolve().parent / "fixtures"
    source = (here / "honest_add.py").read_text()
    results: list = []
    with Evaluator(load_problem(here / "add_problem.py"), "cuda", EvalPolicy(trials=2, spares=2)) as ev:
        threads = [threading.Thread(target=lambda: results.append(ev.evaluate(source)), daemon=True) for _ in range(6)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 600  # one limit for all six, not 600 s each
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in threads), "an evaluation never finished"
    assert [r.verdict for r in results] == ["pass"] * 6 and all(r.timing is not None for r in results)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_timing_the_second_gpu_spins_there_while_the_first_is_current() -> None:
    """The fixed spin before each timed call lands on the GPU being timed, not on the thread's current one:
    its ~1 ms shows in the pre-call events of cuda:1, and the thread's current device is left as it was."""
    from kernelwright.evaluators.timing import measure

    torch.cuda.set_device(0)
    x = torch.randn(1 << 20, device="cuda:1")
    samples = measure(lambda _i: x.mul(2.0), 1, torch.device("cuda", 1), reps=20)
    pre = sorted(samples.pre_ms)[len(samples.pre_ms) // 2]
    assert pre > 0.9, f"the spin did not run on cuda:1 (pre-call events {pre:.3f} ms)"
    assert torch.cuda.current_device() == 0
