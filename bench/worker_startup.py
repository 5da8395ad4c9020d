"""Where a worker's start-up goes, step by step, in fresh processes (GPU host).

    python3 bench/worker_startup.py [--runs 3]

Each run is a fresh interpreter that repeats what `evaluators.worker.Session` does before it is ready
(imports, device set-up, the warm-up's steps one at a time) and prints the seconds of each step; a Triton
cache shared by the runs after the first stands for the pool's seeded cache.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

STEPS = r'''
import json, time
t = [("start", time.perf_counter())]
def mark(n): t.append((n, time.perf_counter()))
import torch; mark("import torch")
import triton, triton.language as tl; mark("import triton")
from torch.utils._python_dispatch import TorchDispatchMode; mark("import dispatch mode")
torch.cuda.set_device(0); mark("set_device")
x = torch.zeros(64, device="cuda"); torch.cuda.synchronize(); mark("first allocation (context)")
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)
mark("define jit")
k[(1,)](x, 64, BLOCK=64); torch.cuda.synchronize(); mark("first triton launch")
k[(1,)](x, 64, BLOCK=64); torch.cuda.synchronize(); mark("second triton launch")
y = (torch.randn(64, 64, device="cuda") @ torch.randn(64, 64, device="cuda")).sum(); torch.cuda.synchronize(); mark("first matmul")
class P(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
with P():
    z = torch.zeros(64, device="cuda"); w = torch.empty_like(z); k[(1,)](z, 64, BLOCK=64)
torch.cuda.synchronize(); mark("under a dispatch mode")
print(json.dumps([(n, round(b - a, 4)) for (_, a), (n, b) in zip(t, t[1:])]))
'''


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="kw-startup-cache-")
    rows = []
    for r in range(a.runs):
        env = {**os.environ, "TRITON_CACHE_DIR": cache}
        script = os.path.join(cache, "steps.py")  # a file: @triton.jit reads its function's source
        with open(script, "w") as f:
            f.write(STEPS)
        out = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stderr[-2000:])
            return 1
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    names = [n for n, _ in rows[0]]
    print("| step | " + " | ".join(f"run {i + 1} s" for i in range(a.runs)) + " |")
    print("| --- |" + " ---: |" * a.runs)
    for i, n in enumerate(names):
        print(f"| {n} | " + " | ".join(f"{row[i][1]:.3f}" for row in rows) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
