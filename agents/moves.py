"""The builtin policy's catalog of parameter moves, and how one is applied to a kernel's source.

`knobs(source)` finds the integer tuning knobs wherever a Triton file keeps them, by reading its AST:

- module constants: `BLOCK_N = 1024` at module level, any UPPER_CASE name (id `BLOCK_N`); every use goes
  through the name, so rewriting the assignment moves them all;
- launch literals: integer keyword arguments of a launch `kernel[grid](..., BLOCK=1024, num_warps=4,
  num_stages=2)` (a call whose callee is a subscript) named like a knob (UPPER_CASE, `num_warps`,
  `num_stages`): id `kernel.BLOCK`, and `kernel#2.BLOCK` for the kernel's second launch in the file;
- local constants passed to a launch: `BLOCK = 1024` assigned once inside the launching function and passed
  as `BLOCK=BLOCK` (id `forward.BLOCK`);
- `tl.constexpr` defaults of an `@triton.jit` function (`BLOCK: tl.constexpr = 1024`, id `kernel.BLOCK`),
  unless a launch in the file or an autotune config sets that parameter (then that literal is the knob);
- `@triton.autotune` configs: every integer of every `triton.Config({...}, num_warps=.., num_stages=..)`
  (id `kernel.cfg0.BLOCK`, the index counting from 0).

A launch literal, local constant or constexpr default of a tiling knob is coupled to the literals in the
launching function that clearly are the same block size: the divisor of `triton.cdiv(n, 1024)` or `cdiv`,
the right operand of `n // 1024` or `n % 1024`, and the `1023` of `(n + 1023) // 1024`. A move rewrites
the knob's literal and its coupled ones together, so grid and block stay consistent. Tiling knobs of one
function with the same value that share coupled literals are one knob (`_row_stats.BLOCK+_normalize.BLOCK`).

Categories come from the name (`category_of`): WARP -> warps, STAGE -> pipelining, GROUP -> grouping,
BLOCK*/*BLOCK/*_SIZE/TILE/CHUNK -> tiling, else other (never moved). A single move changes one knob to a
neighbouring legal value (warps x2 or /2 in 1..32; stages +-1 in 1..6; grouping x2 or /2 in 1..64; tiling
x2 or /2 among powers of two up to 16384, at least 16 where the kernel it feeds calls `tl.dot`). A pair
move changes two knobs of different categories at once (autotune knobs only within one config), for when
single moves plateau. A block size computed at run time (`BLOCK=triton.next_power_of_2(n)`) is no knob.
Applying a move rewrites exactly the knob's literals and nothing else. Pure functions over source text.
"""

from __future__ import annotations

import ast
import functools
import io
import re
from dataclasses import dataclass, field
from itertools import combinations
from typing import Literal, Union

from .schemas import Category
from kernelwright.evaluators import pyast

_KNOB = re.compile(r"^[A-Z][A-Z0-9_]*$")
_LAUNCH_OPTIONS = ("num_warps", "num_stages")
MAX_TILE = 16384
DOT_MIN_TILE = 16
"""`tl.dot` needs every block dimension to be at least 16."""

KnobKind = Literal["constant", "launch", "local", "constexpr", "autotune"]


@dataclass(frozen=True)
class Span:
    """Where a knob's literal sits: 1-based line, [col, end) as the AST's UTF-8 column offsets. The literal
    holds the knob's value plus `offset` (the -1 of `(n + 1023) // 1024`); `context` is the expression a
    coupled literal sits in (empty for the knob's own literal)."""

    line: int
    col: int
    end: int
    offset: int = 0
    context: str = ""


@dataclass(frozen=True)
class Knob:
    id: str
    value: int
    category: Category
    spans: tuple[Span, ...]
    kind: KnobKind = "constant"
    min_value: int = 1
    group: str = ""
    """Autotune knobs: `kernel.cfgI`, the config they belong to; empty for the others."""

    @property
    def name(self) -> str:
        return self.id

    @property
    def line(self) -> int:
        return self.spans[0].line

    @property
    def coupled(self) -> tuple[str, ...]:
        """The expressions holding the knob's coupled literals, in source order."""
        return tuple(s.context for s in self.spans if s.context)


@dataclass(frozen=True)
class Move:
    knob: str
    old: int
    new: int
    category: Category
    coupled: tuple[str, ...] = field(default=(), compare=False)

    @property
    def key(self) -> str:
        return f"{self.knob}={self.new}"

    @property
    def what(self) -> str:
        text = f"{self.knob} {self.old} -> {self.new}"
        if self.coupled:
            counts: dict[str, int] = {}
            for c in self.coupled:
                counts[c] = counts.get(c, 0) + 1
            places = ", ".join(c if n == 1 else f"{c} ({n} places)" for c, n in counts.items())
            text += f" (with the {self.old} in {places})"
        return text


@dataclass(frozen=True)
class PairMove:
    """Two single moves on knobs of different categories, applied together. `first.key < second.key`."""

    first: Move
    second: Move

    @property
    def moves(self) -> tuple[Move, Move]:
        return (self.first, self.second)

    @property
    def key(self) -> str:
        return f"{self.first.key},{self.second.key}"

    @property
    def what(self) -> str:
        return f"{self.first.what} and {self.second.what}"


AnyMove = Union[Move, PairMove]


# -- finding knobs ------------------------------------------------------------------------------------------


def category_of(name: str) -> Category:
    """A knob's category from its name (or id: the part after the last dot counts)."""
    n = name.rsplit(".", 1)[-1].upper()
    if "WARP" in n:
        return "warps"
    if "STAGE" in n:
        return "pipelining"
    if "GROUP" in n:
        return "grouping"
    if (n.startswith("BLOCK") or n.endswith("BLOCK") or n.endswith("_SIZE") or "TILE" in n or "CHUNK" in n
            or n in ("BM", "BN", "BK")):
        return "tiling"
    return "other"


def _int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _span(node: ast.AST, offset: int = 0, context: str = "") -> Span:
    return Span(node.lineno, node.col_offset, node.end_col_offset or node.col_offset, offset, context)


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return ""


def _is_knob_kw(name: str) -> bool:
    return bool(_KNOB.match(name)) or name in _LAUNCH_OPTIONS


def _uses_dot(fn: ast.AST | None) -> bool:
    return fn is not None and any(isinstance(n, ast.Call) and _dotted(n.func).split(".")[-1] == "dot"
                                  for n in ast.walk(fn))


@dataclass
class _Found:
    """A knob while the file is read: its own literal(s), the scopes its coupled literals are looked up in,
    the kernels it feeds."""

    id: str
    value: int
    name: str
    kind: KnobKind
    spans: list[Span]
    scopes: list[ast.AST] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    group: str = ""


class _File:
    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parent: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
        self.kernels: dict[str, ast.FunctionDef] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    _dotted(d).split(".")[-1] in ("jit", "autotune", "heuristics") for d in node.decorator_list):
                self.kernels.setdefault(node.name, node)  # type: ignore[arg-type]
        launches = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
                    and _dotted(n.func.value)]
        self.launches: list[tuple[str, str, ast.Call]] = []  # (kernel, label, call), in source order
        seen: dict[str, int] = {}
        for call in sorted(launches, key=lambda c: (c.lineno, c.col_offset)):
            kernel = _dotted(call.func.value).split(".")[-1]  # type: ignore[attr-defined]
            seen[kernel] = seen.get(kernel, 0) + 1
            self.launches.append((kernel, kernel if seen[kernel] == 1 else f"{kernel}#{seen[kernel]}", call))

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The function a node sits in, or the module."""
        p = self.parent.get(node)
        while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
            p = self.parent.get(p)
        return p if p is not None else self.tree

    def walk_scope(self, scope: ast.AST):
        if isinstance(scope, ast.Module):
            for stmt in scope.body:
                if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    yield from ast.walk(stmt)
        else:
            yield from ast.walk(scope)

    def coupled_in(self, scope: ast.AST, value: int) -> list[Span]:
        """The literals of a scope that clearly are the block size `value` (see the module docstring)."""
        out: list[Span] = []
        for node in self.walk_scope(scope):
            v = _int(node)
            if v is None:
                continue
            p = self.parent.get(node)
            if v == value and isinstance(p, ast.Call) and _dotted(p.func).split(".")[-1] == "cdiv" \
                    and len(p.args) == 2 and p.args[1] is node:
                out.append(_span(node, 0, ast.unparse(p)))
            elif v == value and isinstance(p, ast.BinOp) and isinstance(p.op, (ast.FloorDiv, ast.Mod)) \
                    and p.right is node:
                out.append(_span(node, 0, ast.unparse(p)))
            elif v in (value, value - 1) and value > 1 and isinstance(p, ast.BinOp) \
                    and isinstance(p.op, (ast.Add, ast.Sub)):
                # the 1023 (or 1024 - 1) of (n + 1023) // 1024: up through + and - to a // by the value
                child, up = node, p
                if isinstance(up.op, ast.Sub) and up.left is not child:
                    continue  # n - 1024 // 1024 subtracts it: not a rounding term
                while isinstance(up, ast.BinOp) and isinstance(up.op, (ast.Add, ast.Sub)):
                    child, up = up, self.parent.get(up)  # type: ignore[assignment]
                if isinstance(up, ast.BinOp) and isinstance(up.op, ast.FloorDiv) and up.left is child \
                        and _int(up.right) == value:
                    out.append(_span(node, v - value, ast.unparse(up)))
        return out


def _found(f: _File) -> list[_Found]:
    found: list[_Found] = []
    # module constants
    for node in f.tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, v = node.targets[0].id, _int(node.value)
            if _KNOB.match(name) and v is not None:
                feeds = [k for k, fn in f.kernels.items() if name in {a.arg for a in _params(fn)}]
                found.append(_Found(name, v, name, "constant", [_span(node.value)], kernels=feeds))
    # launch literals and the local constants passed to launches
    passed: dict[str, set[str]] = {}  # kernel -> the parameters its launches set by keyword
    positional: dict[str, int] = {}
    locals_seen: set[tuple[int, str]] = set()
    for kernel, label, call in f.launches:
        scope = f.scope_of(call)
        positional[kernel] = max(positional.get(kernel, 0),
                                 10**6 if any(isinstance(a, ast.Starred) for a in call.args) else len(call.args))
        for kw in call.keywords:
            if kw.arg is None:
                passed.setdefault(kernel, set()).add("**")
                continue
            passed.setdefault(kernel, set()).add(kw.arg)
            if not _is_knob_kw(kw.arg):
                continue
            v = _int(kw.value)
            if v is not None:
                found.append(_Found(f"{label}.{kw.arg}", v, kw.arg, "launch", [_span(kw.value)], [scope], [kernel]))
            elif isinstance(kw.value, ast.Name) and not isinstance(scope, ast.Module):
                local = _local_constant(f, scope, kw.value.id)
                if local is None:
                    continue
                if (id(scope), kw.value.id) in locals_seen:
                    next(k for k in found if k.kind == "local" and k.scopes[0] is scope
                         and k.name == kw.value.id).kernels.append(kernel)
                    continue
                locals_seen.add((id(scope), kw.value.id))
                found.append(_Found(f"{scope.name}.{kw.value.id}", _int(local.value) or 0,  # type: ignore[attr-defined]
                                    kw.value.id, "local", [_span(local.value)], [scope], [kernel]))
    # autotune configs, and constexpr defaults nobody overrides
    for kernel, fn in f.kernels.items():
        tuned: set[str] = set()
        for dec in fn.decorator_list:
            if isinstance(dec, ast.Call) and _dotted(dec.func).split(".")[-1] == "autotune":
                for i, key, node in _configs(dec):
                    tuned.add(key)
                    if _is_knob_kw(key) or category_of(key) != "other":
                        found.append(_Found(f"{kernel}.cfg{i}.{key}", _int(node) or 0, key, "autotune",
                                            [_span(node)], kernels=[kernel], group=f"{kernel}.cfg{i}"))
        params = _params(fn)
        defaults = _defaults(fn)
        launched_by = [f.scope_of(call) for k, _, call in f.launches if k == kernel]
        for index, arg in enumerate(params):
            default = defaults.get(arg.arg)
            v = _int(default)
            if v is None or arg.annotation is None or not ast.unparse(arg.annotation).endswith("constexpr"):
                continue
            setters = passed.get(kernel, set())
            if arg.arg in setters or "**" in setters or arg.arg in tuned or index < positional.get(kernel, 0):
                continue
            scopes = list({id(s): s for s in launched_by}.values())
            found.append(_Found(f"{kernel}.{arg.arg}", v, arg.arg, "constexpr", [_span(default)], scopes,
                                [kernel]))  # type: ignore[arg-type]
    return found


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    return [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]


def _defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, ast.expr]:
    positional = [*fn.args.posonlyargs, *fn.args.args]
    out = {a.arg: d for a, d in zip(positional[len(positional) - len(fn.args.defaults):], fn.args.defaults)}
    out.update({a.arg: d for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None})
    return out


def _local_constant(f: _File, scope: ast.AST, name: str) -> ast.Assign | None:
    """The one `NAME = <int>` of a function, when the name is knob-like and never bound anywhere else."""
    if not (_is_knob_kw(name) or category_of(name) != "other"):
        return None
    if name in {a.arg for a in _params(scope)}:  # type: ignore[arg-type]
        return None
    stores = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]
    if len(stores) != 1:
        return None
    assign = f.parent.get(stores[0])
    if isinstance(assign, ast.Assign) and len(assign.targets) == 1 and assign.targets[0] is stores[0] \
            and _int(assign.value) is not None:
        return assign
    return None


def _configs(dec: ast.Call):
    """(index, name, literal) for every integer of every triton.Config of an autotune decorator."""
    configs = next((kw.value for kw in dec.keywords if kw.arg == "configs"), dec.args[0] if dec.args else None)
    if not isinstance(configs, (ast.List, ast.Tuple)):
        return
    for i, cfg in enumerate(configs.elts):
        if not (isinstance(cfg, ast.Call) and _dotted(cfg.func).split(".")[-1] == "Config"):
            continue
        kwargs = cfg.args[0] if cfg.args else next((kw.value for kw in cfg.keywords if kw.arg == "kwargs"), None)
        if isinstance(kwargs, ast.Dict):
            for k, v in zip(kwargs.keys, kwargs.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, str) and _int(v) is not None:
                    yield i, k.value, v
        for kw in cfg.keywords:
            if kw.arg in _LAUNCH_OPTIONS and _int(kw.value) is not None:
                yield i, kw.arg, kw.value


def knobs(source: str) -> dict[str, Knob]:
    """Every integer tuning knob of the source, by id (see the module docstring), in source order."""
    return dict(_knobs(source))


@functools.lru_cache(maxsize=512)
def _knobs(source: str) -> tuple[tuple[str, Knob], ...]:
    """`knobs`, remembered by source: reading a kernel's AST takes tens of milliseconds, and a generation asks
    for the knobs of every kernel on each branch's lineage (32 branches: a thousand reads). A pure function of
    the source, and `Knob` is frozen, so one run's answers are any run's."""
    return tuple(_read_knobs(source).items())


def _read_knobs(source: str) -> dict[str, Knob]:
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return {}
    f = _File(tree)
    raw = _found(f)
    for k in raw:
        if k.kind in ("launch", "local", "constexpr") and category_of(k.name) == "tiling":
            seen = {(s.line, s.col) for s in k.spans}
            for scope in k.scopes:
                k.spans += [s for s in f.coupled_in(scope, k.value) if (s.line, s.col) not in seen]
                seen |= {(s.line, s.col) for s in k.spans}
    # tiling knobs of one value sharing coupled literals are one knob
    root = list(range(len(raw)))

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    where = {}
    for i, k in enumerate(raw):
        for s in k.spans[1:]:
            j = where.setdefault((s.line, s.col), i)
            if j != i and raw[j].value == k.value:
                root[find(i)] = find(j)
    merged: dict[int, list[_Found]] = {}
    for i, k in enumerate(raw):
        merged.setdefault(find(i), []).append(k)
    out: list[Knob] = []
    for group in merged.values():
        group.sort(key=lambda k: (k.spans[0].line, k.spans[0].col))
        own = [k.spans[0] for k in group]
        seen = {(s.line, s.col) for s in own}
        coupled = sorted({(s.line, s.col): s for k in group for s in k.spans[1:] if (s.line, s.col) not in seen}
                         .values(), key=lambda s: (s.line, s.col))
        kernels = [f.kernels.get(name) for k in group for name in k.kernels]
        cat = category_of(group[0].name)
        low = DOT_MIN_TILE if cat == "tiling" and any(_uses_dot(fn) for fn in kernels) else 1
        out.append(Knob("+".join(k.id for k in group), group[0].value, cat, (*own, *coupled), group[0].kind,
                        low, group[0].group))
    out.sort(key=lambda k: (k.spans[0].line, k.spans[0].col))
    return {k.id: k for k in out}


# -- moves --------------------------------------------------------------------------------------------------


def neighbours(knob: Knob) -> list[int]:
    """The legal values one move away from the knob's."""
    value, cat = knob.value, knob.category
    if cat == "warps":
        return [v for v in (value // 2, value * 2) if v in (1, 2, 4, 8, 16, 32) and v != value]
    if cat == "pipelining":
        return [v for v in (value - 1, value + 1) if 1 <= v <= 6]
    if cat == "grouping":
        return [v for v in (value // 2, value * 2) if 1 <= v <= 64 and v != value]
    if cat == "tiling":
        return [v for v in (value // 2, value * 2)
                if max(1, knob.min_value) <= v <= MAX_TILE and v & (v - 1) == 0 and v != value]
    return []


def catalog(source: str) -> list[Move]:
    """Every single-knob move available on this source."""
    return [Move(k.id, k.value, new, k.category, k.coupled) for k in knobs(source).values() for new in neighbours(k)]


def pair_catalog(source: str) -> list[PairMove]:
    """Every move of two knobs of different categories at once (two autotune knobs only of one config, and
    never an autotune knob with another kind), sorted by key."""
    found = knobs(source)
    singles = catalog(source)
    pairs: dict[str, PairMove] = {}
    for a, b in combinations(singles, 2):
        ka, kb = found[a.knob], found[b.knob]
        if a.knob == b.knob or a.category == b.category or ka.group != kb.group:
            continue
        first, second = sorted((a, b), key=lambda m: m.key)
        pair = PairMove(first, second)
        pairs[pair.key] = pair
    return [pairs[k] for k in sorted(pairs)]


def apply(source: str, move: AnyMove) -> str:
    """The source with the move applied: every literal of the knob (its own and the coupled ones) rewritten,
    everything else untouched. A pair applies both moves. KeyError when the source has no such knob,
    ValueError when the knob no longer has the move's old value or the result would not parse."""
    if isinstance(move, PairMove):
        for m in move.moves:
            source = apply(source, m)
        return source
    k = knobs(source).get(move.knob)
    if k is None:
        raise KeyError(f"no knob {move.knob} in the source")
    if k.value != move.old:
        raise ValueError(f"{move.knob} is {k.value}, not {move.old}")
    if any(move.new + s.offset < 0 for s in k.spans):
        raise ValueError(f"{move.knob} cannot be {move.new}")
    lines = io.StringIO(source, newline="").readlines()
    by_line: dict[int, list[Span]] = {}
    for s in k.spans:
        by_line.setdefault(s.line, []).append(s)
    for line, spans in by_line.items():
        raw = lines[line - 1].encode()
        for s in sorted(spans, key=lambda s: s.col, reverse=True):
            text = raw[s.col:s.end].decode()
            try:
                ok = ast.literal_eval(text) == move.old + s.offset
            except (ValueError, SyntaxError):
                ok = False
            if not ok:
                raise ValueError(f"cannot rewrite {move.knob} on line {line}: {text!r} is not {move.old + s.offset}")
            raw = raw[:s.col] + str(move.new + s.offset).encode() + raw[s.end:]
        lines[line - 1] = raw.decode()
    out = "".join(lines)
    try:
        pyast.parse(out)
    except SyntaxError as e:
        raise ValueError(f"rewriting {move.knob} would break the source: {e}") from e
    return out


# -- when there is nothing to move --------------------------------------------------------------------------


NO_KNOBS = ("The builtin policy found nothing to tune in this kernel: it moves integer knobs (module-level "
            "UPPER_CASE constants, literal BLOCK-style, num_warps and num_stages arguments of kernel launches, "
            "tl.constexpr defaults and triton.autotune configs), a block size computed at run time (such as "
            "BLOCK=triton.next_power_of_2(n)) is not a knob, and structural changes need a language-model "
            "strategist (--model provider:model).")


def no_moves_reason(source: str, tried: set[str]) -> str:
    """One honest sentence on why the builtin policy has no move left for this source: it has no knobs,
    its knobs have no legal neighbour, or every single and pair move was tried (`tried`: proposal keys
    already tried from this parent). When moves are left, says how many."""
    try:
        pyast.parse(source)
    except SyntaxError:
        return "The kernel's source does not parse, so the builtin policy cannot look for knobs in it."
    found = knobs(source)
    if not found:
        return NO_KNOBS
    if not any(neighbours(k) for k in found.values()):
        listed = ", ".join(f"{k.id}={k.value} ({k.category})" for k in found.values())
        return (f"The builtin policy has no move for this kernel: its integer constants ({listed}) are either "
                "not named like tuning knobs (BLOCK*, *_SIZE, TILE, CHUNK, *WARP*, *STAGE*, *GROUP*) or have no "
                "legal neighbouring value (tiling knobs must be powers of two), and structural changes need a "
                "language-model strategist (--model provider:model).")
    singles, pairs = catalog(source), pair_catalog(source)
    moved = sorted({m.knob for m in singles}, key=list(found).index)
    left_s = [m for m in singles if m.key not in tried]
    left_p = [p for p in pairs if p.key not in tried]
    if left_s or left_p:
        return (f"{len(left_s)} of {len(singles)} single moves and {len(left_p)} of {len(pairs)} pair moves on "
                f"{', '.join(moved)} are still untried from this parent.")

    def n(count: int, what: str) -> str:
        return f"{count} {what} move{'' if count == 1 else 's'}"

    return (f"Every move the builtin policy has for this kernel was tried from this parent: "
            f"{n(len(singles), 'single')} and {n(len(pairs), 'pair')} on {', '.join(moved)}; structural changes "
            "need a language-model strategist (--model provider:model).")
