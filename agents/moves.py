"""The builtin policy's catalog of parameter moves, and how one is applied to a kernel's source.

A seed kernel exposes its tuning knobs as module-level constants (`BLOCK_N = 1024`, `NUM_WARPS = 4`,
`NUM_STAGES = 2`, `GROUP_M = 8`, ...). A move changes exactly one of them to a neighbouring legal value;
applying it rewrites that one assignment and nothing else. Pure functions over source text.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from .schemas import Category

_KNOB = re.compile(r"^[A-Z][A-Z0-9_]*$")


@dataclass(frozen=True)
class Knob:
    name: str
    value: int
    line: int  # 1-based


@dataclass(frozen=True)
class Move:
    knob: str
    old: int
    new: int
    category: Category

    @property
    def key(self) -> str:
        return f"{self.knob}={self.new}"

    @property
    def what(self) -> str:
        return f"{self.knob} {self.old} -> {self.new}"


def knobs(source: str) -> dict[str, Knob]:
    """Module-level integer constants in UPPER_CASE: the kernel's tuning knobs."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    found: dict[str, Knob] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            v = node.value
            if _KNOB.match(name) and isinstance(v, ast.Constant) and type(v.value) is int:
                found[name] = Knob(name, v.value, node.lineno)
    return found


def category_of(name: str) -> Category:
    if "WARP" in name:
        return "warps"
    if "STAGE" in name:
        return "pipelining"
    if "GROUP" in name:
        return "grouping"
    if name.startswith("BLOCK") or name.endswith("_SIZE") or "TILE" in name:
        return "tiling"
    return "other"


def _neighbours(name: str, value: int) -> list[int]:
    cat = category_of(name)
    if cat == "warps":
        return [v for v in (value // 2, value * 2) if v in (1, 2, 4, 8, 16, 32)]
    if cat == "pipelining":
        return [v for v in (value - 1, value + 1) if 1 <= v <= 6]
    if cat == "grouping":
        return [v for v in (value // 2, value * 2) if 1 <= v <= 64]
    if cat == "tiling":
        return [v for v in (value // 2, value * 2) if 1 <= v <= 16384 and v & (v - 1) == 0]
    return []


def catalog(source: str) -> list[Move]:
    """Every single-knob move available on this source."""
    return [Move(k.name, k.value, new, category_of(k.name))
            for k in knobs(source).values() for new in _neighbours(k.name, k.value)]


def apply(source: str, move: Move) -> str:
    """The source with the move applied: the knob's assignment line rewritten, everything else untouched."""
    k = knobs(source).get(move.knob)
    if k is None:
        raise KeyError(f"no knob {move.knob} in the source")
    if k.value != move.old:
        raise ValueError(f"{move.knob} is {k.value}, not {move.old}")
    lines = source.splitlines(keepends=True)
    line = lines[k.line - 1]
    new_line, n = re.subn(rf"^(\s*{re.escape(move.knob)}\s*=\s*){move.old}\b", rf"\g<1>{move.new}", line)
    if n != 1:
        raise ValueError(f"cannot rewrite the assignment of {move.knob} on line {k.line}")
    lines[k.line - 1] = new_line
    return "".join(lines)
