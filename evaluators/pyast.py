"""`ast.parse` under one lock per process. CPython 3.11 keeps the AST converter's recursion depth in state that
threads share (python/cpython#106905), so two threads parsing at once can raise `SystemError: AST constructor
recursion depth mismatch`. kernelwright parses in threads: two branches judging kernels at once (the static
check, the compile allowance), the builtin's moves, the coder's syntax check. A CPU test saw it end a run through
a Ray cluster and fail an honest child. One lock for the process is right here: the bug is the interpreter's,
not a run's, and a parse takes milliseconds."""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, one thread at a time (SyntaxError and ValueError as ast.parse raises them)."""
    with _LOCK:
        return ast.parse(source, filename)
