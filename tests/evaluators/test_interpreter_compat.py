"""Triton 3.6's interpreter (the GPU image's) turns a scalar into an index with `int()` of its one-element array,
which NumPy 2 refuses: `for p in range(0, N, BLOCK)` with N a runtime argument failed there for every kernel, and the
ordering check refused a model's GroupNorm that runs on the GPU (issue 23, an H100 run). The worker squeezes the
array first, as Triton 3.9 does (`worker._interpreter_index_compat`). This machine's Triton may already squeeze, so
Triton 3.6's behaviour is put back first and shown to fail. In a process of its own: the interpreter is chosen from
the environment when Triton is first imported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = pytest.mark.timeout(120)

SCRIPT = textwrap.dedent('''
    import torch, triton, triton.language as tl
    from triton.runtime import interpreter
    from kernelwright.evaluators import worker

    newer = interpreter._patch_lang_tensor

    def as_in_triton_36(tensor, scope):
        newer(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    interpreter._patch_lang_tensor = as_in_triton_36

    @triton.jit
    def total(x, y, N, BLOCK: tl.constexpr):
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for p in range(0, N, BLOCK):  # a runtime loop bound
            idx = p + tl.arange(0, BLOCK)
            acc += tl.load(x + idx, mask=idx < N, other=0.0)
        tl.store(y, tl.sum(acc, axis=0))

    x, y = torch.randn(1000), torch.zeros(1)
    try:
        total[(1,)](x, y, 1000, BLOCK=128)
        print("before: ran")
    except Exception as e:
        print("before:", type(e).__name__, e)
    worker._interpreter_index_compat()
    worker._interpreter_index_compat()  # idempotent: wrapped once
    assert interpreter._patch_lang_tensor.kw_index_compat
    assert interpreter._patch_lang_tensor.__closure__[0].cell_contents is as_in_triton_36
    total[(1,)](x, y, 1000, BLOCK=128)
    torch.testing.assert_close(y[0], x.sum(), rtol=1e-5, atol=1e-4)
    print("after: ran")
''')


def test_a_runtime_loop_bound_runs_in_the_interpreter_with_triton_36s_index() -> None:
    if int(np.__version__.split(".")[0]) < 2:
        pytest.skip("NumPy 1 converts a one-element array to an index itself")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=100)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "only 0-dimensional arrays" in out.stdout, out.stdout  # Triton 3.6's index, as the GPU image has it
    assert out.stdout.rstrip().endswith("after: ran"), out.stdout
