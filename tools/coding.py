"""The coder's editing tools: a workspace holding the kernel being changed, and the LangChain tools a
model edits it with (view, search/replace, write, quick check, finish). No model and no run state here:
the coder role binds these tools to its model; the quick check is whatever the caller passes in.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Protocol

from langchain_core.tools import BaseTool, tool

from kernelwright.evaluators import pyast


class QuickCheck(Protocol):
    """source -> (passes, a bounded message for the model). `shapes`: shape variants to check besides the
    problem's own shapes (`evaluators.variants`: small, odd, tail); a check that takes only the source is
    called with none and cannot offer variants."""

    def __call__(self, source: str, shapes: tuple[str, ...] = ..., /) -> tuple[bool, str]: ...


SHAPES = ("small", "odd", "tail")
"""the shape variants `quick_check(shapes=...)` accepts (`evaluators.variants.VARIANTS`)"""


def syntax_check(source: str) -> tuple[bool, str]:
    """The cheapest quick check: the file parses and compiles and defines ModelNew."""
    try:
        tree = pyast.parse(source)
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
    """(source, passes, message) of the last check at the problem's own shapes"""
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
    def quick_check(shapes: list[str] | str | None = None) -> str:
        """Compile the current kernel and run a fast correctness check at the problem's own shapes. `shapes`:
        also run it at shape variants made from the problem's size constants (batch_size, dim, ...), each
        judged apart: "small" (the largest size halved until the inputs are small), "odd" (the small sizes
        times 3/4, made odd, and so are the weights' sizes that only get_init_inputs reads: a kernel that assumes
        a multiple of its block size fails there), "tail" (the real
        magnitude with a ragged last block: the largest constant set to a multiple of 1024 plus 37, or, when no
        size reaches that, the two largest made odd, 512 -> 511; other sizes halved: several blocks per row).
        A size the reference refuses to see odd keeps its value. Example: quick_check(shapes=["small", "odd",
        "tail"]); only these names, no sizes of your own (each variant's sizes are fixed per problem and accepted
        by its reference). The reply names each shape
        with its sizes and says pass, or fail with the reason; "not varied by any shape: NAME=V" names sizes only
        get_init_inputs reads that no variant it ran changed (the weights keep them; only "odd" makes those it
        can odd). The variants only inform you: finish() needs the problem's own shapes to pass."""
        names = tuple(dict.fromkeys([shapes] if isinstance(shapes, str) else shapes or ()))
        unknown = [n for n in names if n not in SHAPES]
        if unknown:
            return f"error: unknown shape {unknown[0]!r}; the shapes are {', '.join(repr(n) for n in SHAPES)}"
        ok, msg = check_workspace(ws, check, names)
        return ("pass: " if ok else "fail: ") + msg

    @tool
    def finish() -> str:
        """Declare the change done. Runs the quick check itself (at the problem's own shapes); the kernel must
        pass it, so no separate quick_check is needed right before finish, and edits, a check and finish may come
        in one reply."""
        ok, msg = check_workspace(ws, check)
        if not ok:
            return f"error: the quick check fails ({msg}); repair the kernel, then call finish again"
        ws.finished = True
        return "done"

    return [view_kernel, search_replace, write_kernel, quick_check, finish]


def check_workspace(ws: Workspace, fn: QuickCheck, shapes: tuple[str, ...] = ()) -> tuple[bool, str]:
    """The syntax check, then `fn`, on the workspace's current text. The verdict at the problem's own shapes is
    remembered until the text changes (so finish() after a passing quick_check costs nothing); a check with
    shape variants is run each time it is asked for, and passes only when every shape it ran passes."""
    if shapes:
        ok, msg = syntax_check(ws.source)
        if not ok:
            return False, msg
        ok, msg = fn(ws.source, shapes)
        return ok, msg[:3000]
    if ws.checked is None or ws.checked[0] != ws.source:
        ok, msg = syntax_check(ws.source)
        if ok:
            ok, msg = fn(ws.source)
        ws.checked = (ws.source, ok, msg[:2000])
    return ws.checked[1], ws.checked[2]
