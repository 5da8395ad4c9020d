"""The coder's editing tools: a workspace holding the kernel being changed, and the LangChain tools a
model edits it with (view, search/replace, write, quick check, finish). No model and no run state here:
the coder role binds these tools to its model; the quick check is whatever the caller passes in.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable

from langchain_core.tools import BaseTool, tool


QuickCheck = Callable[[str], tuple[bool, str]]
"""source -> (passes, a bounded message for the model)."""


def syntax_check(source: str) -> tuple[bool, str]:
    """The cheapest quick check: the file parses and compiles and defines ModelNew."""
    try:
        tree = ast.parse(source)
        compile(tree, "kernel.py", "exec")
    except SyntaxError as e:
        return False, f"syntax error on line {e.lineno}: {e.msg}"
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return False, "the file defines no class ModelNew"
    return True, "compiles"


@dataclass
class Workspace:
    source: str
    checked: tuple[str, bool, str] | None = None
    finished: bool = False


def coder_tools(ws: Workspace, check: QuickCheck) -> list[BaseTool]:
    """The coder's tools over one workspace (the current kernel text)."""

    @tool
    def view_kernel(start: int = 1, end: int = 10_000) -> str:
        """Show lines start..end (1-based, inclusive) of the current kernel, numbered."""
        lines = ws.source.splitlines()
        start, end = max(1, start), min(len(lines), end)
        return "\n".join(f"{i:4d}| {lines[i - 1]}" for i in range(start, end + 1)) or "(no such lines)"

    @tool
    def search_replace(old: str, new: str) -> str:
        """Replace the single occurrence of `old` in the current kernel with `new`."""
        n = ws.source.count(old) if old else 0
        if n != 1:
            return (f"error: `old` matches {n} times; it must match exactly once (copy it from view_kernel, "
                    "with enough context to be unique)")
        ws.source = ws.source.replace(old, new, 1)
        return "replaced 1 occurrence"

    @tool
    def write_kernel(source: str) -> str:
        """Replace the whole kernel file with `source`."""
        ws.source = source
        return f"written ({len(source.splitlines())} lines)"

    @tool
    def quick_check() -> str:
        """Compile the current kernel and run a fast correctness check."""
        ok, msg = check_workspace(ws, check)
        return ("pass: " if ok else "fail: ") + msg

    @tool
    def finish() -> str:
        """Declare the change done; the current kernel must pass the quick check."""
        ok, msg = check_workspace(ws, check)
        if not ok:
            return f"error: the quick check fails ({msg}); repair the kernel, then call finish again"
        ws.finished = True
        return "done"

    return [view_kernel, search_replace, write_kernel, quick_check, finish]


def check_workspace(ws: Workspace, fn: QuickCheck) -> tuple[bool, str]:
    """The syntax check, then `fn`, on the workspace's current text (remembered until the text changes)."""
    if ws.checked is None or ws.checked[0] != ws.source:
        ok, msg = syntax_check(ws.source)
        if ok:
            ok, msg = fn(ws.source)
        ws.checked = (ws.source, ok, msg[:2000])
    return ws.checked[1], ws.checked[2]
