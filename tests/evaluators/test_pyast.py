"""Every parse of Python source in the trusted process goes through evaluators/pyast.py, one thread at a time:
CPython 3.11's ast converter shares its recursion depth between threads (python/cpython#106905), and two
branches parsing at once raised `SystemError: AST constructor recursion depth mismatch` in a CPU test (a run
through a Ray cluster ended, an honest child was failed)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from kernelwright.evaluators import pyast
from kernelwright.evaluators.static import check_source

ROOT = Path(__file__).resolve().parents[2]


def test_no_module_parses_outside_the_lock() -> None:
    direct = [f"{p.relative_to(ROOT)}:{n}" for d in ("agents", "tools", "evaluators", "graphs", "kernelwright")
              for p in sorted((ROOT / d).rglob("*.py")) if p.name != "pyast.py"
              for n, line in enumerate(p.read_text().splitlines(), 1)
              if re.search(r"\bast\.parse\(|PyCF_ONLY_AST", line) and not line.lstrip().startswith("#")]
    assert direct == [], f"parse through evaluators.pyast.parse: {direct}"


def test_the_static_check_parses_under_the_lock(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    held: list[bool] = []

    class Watched:
        def __init__(self) -> None:
            self.lock = threading.Lock()

        def __enter__(self) -> None:
            self.lock.acquire()
            held.append(True)

        def __exit__(self, *exc: object) -> None:
            self.lock.release()

    monkeypatch.setattr(pyast, "_LOCK", Watched())
    assert check_source("import triton\nx = 1\n") == [] and held == [True]
