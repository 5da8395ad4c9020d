"""Test-wide settings. The one place that reads `KW_TEST_DEVICE`.

`KW_TEST_DEVICE` picks the device the evaluator suites (tests/evaluators/test_adversarial.py and
test_honest.py) judge candidates on: "cpu" (the default: Triton's interpreter, no GPU needed) or "cuda"
(a GPU host; tests/gpu/test_suites_on_gpu.py runs both suites that way).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

DEVICES = ("cpu", "cuda")

# the suite never writes into the user's data directory (the knowledge store, tools/knowledge.py, lives there): the
# session, and every process it starts, gets a folder of its own, removed at the end; and each test one of its own
# (`_own_data_home`), so that what one test's run learns is never shown to another's
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="kw-test-data-")
atexit.register(shutil.rmtree, os.environ["XDG_DATA_HOME"], True)


@pytest.fixture(autouse=True)
def _own_data_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", tempfile.mkdtemp(prefix="test-", dir=os.environ["XDG_DATA_HOME"]))


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
