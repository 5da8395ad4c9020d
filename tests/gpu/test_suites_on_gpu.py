"""The CPU suites on a GPU: the adversarial suite and the honest kernels, judged on cuda.

Each suite runs in a subprocess with KW_TEST_DEVICE=cuda (read by tests/conftest.py), so its candidates go
through CUDA workers, the profiler's kernel-time coverage and timing instead of Triton's interpreter.
Verdicts that legitimately differ on a GPU are stated in the candidates' EXPECT_CUDA lines.

Slow: the adversarial suite is ~150 evaluations, each needing a fresh worker (a CUDA context), so it is
split in two (the static-filter-on cases and the `-runtime` ones); expect several minutes per part. Run one
part per command where commands are time-limited, e.g.
    .ci/gpu-host test tests/gpu/test_suites_on_gpu.py -k honest
    .ci/gpu-host test tests/gpu/test_suites_on_gpu.py -k "adversarial and not runtime"
    .ci/gpu-host test tests/gpu/test_suites_on_gpu.py -k adversarial_runtime
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SUITES = {
    "adversarial": ["tests/evaluators/test_adversarial.py", "-k", "not runtime"],
    "adversarial_runtime": ["tests/evaluators/test_adversarial.py", "-k", "runtime"],
    "honest": ["tests/evaluators/test_honest.py"],
}
TIMEOUT_S = 1800

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.timeout(TIMEOUT_S + 60)
@pytest.mark.parametrize("suite", list(SUITES))
def test_suite_passes_on_cuda(suite: str) -> None:
    env = dict(os.environ, KW_TEST_DEVICE="cuda")
    # No -x: on a GPU host every failing case is worth seeing in one run.
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfEs", *SUITES[suite]]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail(f"{suite} on cuda did not finish within {TIMEOUT_S} s; last output:\n{out[-6000:]}")
    tail = (proc.stdout + proc.stderr)[-8000:]
    print(tail)
    assert proc.returncode == 0, f"{suite} on cuda failed (exit {proc.returncode}):\n{tail}"
