"""Where does a candidate's timed median come from? Host overhead vs device time, per timing variant.

    python bench/timing_probe.py examples/softmax/problem.py examples/softmax/seed.py
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch
import torch._dynamo  # noqa: F401 - imported before the guards, as the worker's warm-up does
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kernelwright.evaluators import guards  # noqa: E402
from kernelwright.evaluators.timing import flush_buffer, measure  # noqa: E402


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    prob, cand = sys.argv[1], sys.argv[2]
    P, C = load(prob, "prob"), load(cand, "kw_candidate_probe")
    dev = torch.device("cuda")
    ref = P.Model(*P.get_init_inputs()).to(dev)
    model = C.ModelNew(*P.get_init_inputs()).to(dev)
    model.load_state_dict(ref.state_dict())
    sets = [[x.to(dev) for x in P.get_inputs()] for _ in range(30)]
    flush = flush_buffer(dev)
    rows = []

    def med(s):
        return statistics.median(s.event_ms) * 1e3, statistics.median(s.wall_ms) * 1e3

    with torch.no_grad():
        rows.append(("do_bench", triton.testing.do_bench(lambda: model(*sets[0]), return_mode="median") * 1e3, 0))
        for hide in (0, 200_000):
            s = measure(lambda i: model(*sets[i]), 30, dev, flush=flush, hide_host_ns=hide)
            rows.append((f"plain hide={hide}", *med(s)))
        g = guards.Guard(str(Path(cand).resolve()), dev)
        guards.install(g)
        model2 = load(cand, "kw_candidate_probe2").ModelNew(*P.get_init_inputs()).to(dev)

        def run(i):
            g.forward_active = True
            try:
                with guards.OpRecorder(g):
                    return model2(*sets[i])
            finally:
                g.forward_active = False

        for hide in (0, 200_000):
            s = measure(run, 30, dev, flush=flush, hide_host_ns=hide)
            rows.append((f"recorder hide={hide}", *med(s)))
        t0 = time.perf_counter()
        for i in range(100):
            run(i % 30)
        torch.cuda.synchronize()
        rows.append(("host loop per call (recorder)", (time.perf_counter() - t0) / 100 * 1e6, 0))
        t0 = time.perf_counter()
        for i in range(100):
            model2(*sets[i % 30])
        torch.cuda.synchronize()
        rows.append(("host loop per call (plain)", (time.perf_counter() - t0) / 100 * 1e6, 0))
        s = measure(lambda i: ref(*sets[i]), 30, dev, flush=flush)
        rows.append(("eager reference", *med(s)))
        print(g.take()["ops"])
    for name, ev, wall in rows:
        print(f"{name:34s} event {ev:9.1f} µs  wall {wall:9.1f} µs")


if __name__ == "__main__":
    main()
