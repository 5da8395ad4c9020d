"""Test-wide settings. The one place that reads `KW_TEST_DEVICE`.

`KW_TEST_DEVICE` picks the device the evaluator suites (tests/evaluators/test_adversarial.py and
test_honest.py) judge candidates on: "cpu" (the default: Triton's interpreter, no GPU needed) or "cuda"
(a GPU host; tests/gpu/test_suites_on_gpu.py runs both suites that way).
"""

from __future__ import annotations

import os

import pytest

DEVICES = ("cpu", "cuda")


def kw_test_device() -> str:
    """The device named by KW_TEST_DEVICE ("cpu" when unset)."""
    device = os.environ.get("KW_TEST_DEVICE", "cpu").strip().lower() or "cpu"
    if device not in DEVICES:
        raise pytest.UsageError(f"KW_TEST_DEVICE={device!r}: use one of {', '.join(DEVICES)}")
    return device


@pytest.fixture(scope="session")
def test_device() -> str:
    """The device the evaluator suites run candidates on; skips everything that asks for cuda without one."""
    device = kw_test_device()
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            pytest.skip("KW_TEST_DEVICE=cuda but no CUDA GPU is visible")
    return device
