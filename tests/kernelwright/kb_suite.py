"""A small suite in KernelBench's layout and a directory of kernels for it, for the `bench` tests (local and on
a Ray cluster): an honest kernel, a wrong one, a cheating one and a problem with no kernel, plus what a test adds."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HONEST = ROOT / "tests" / "kernels" / "honest"
ADV = ROOT / "tests" / "adversarial"

COMMON = {  # problem file in the suite -> (its source, the kernel for it or None)
    "level1/1_ReLU.py": (HONEST / "relu_problem.py", HONEST / "relu_candidate.py"),
    "level1/2_ReLU_signs.py": (ADV / "problems" / "relu.py", ADV / "candidates" / "a05_identity_relu.py"),
    "level1/3_Softmax.py": (ADV / "problems" / "softmax_wide.py", ADV / "candidates" / "a01_aten_ops.py"),
    "level1/4_RowSum.py": (HONEST / "row_sum_problem.py", None),
}


def write_suite(tmp_path: Path, extra: dict[str, tuple[Path, Path | None]],
                kernel_names: dict[str, str] | None = None) -> tuple[Path, Path]:
    """`COMMON` and `extra` written to tmp_path/suite, their kernels to tmp_path/kernels under the problem's
    name or the one `kernel_names` gives it (KernelBench's `_triton` naming, say)."""
    s, k = tmp_path / "suite", tmp_path / "kernels"
    for name, (problem, kernel) in {**COMMON, **extra}.items():
        (s / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(problem, s / name)
        if kernel is not None:
            dest = k / (kernel_names or {}).get(name, name)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(kernel, dest)
    return s, k
