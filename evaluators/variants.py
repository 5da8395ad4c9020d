"""Shape variants of a problem: its module-level size constants (KernelBench's `batch_size`, `dim`, ...) set to
other values, so that a kernel is run at sizes its author did not tune it for.

The one definition of the concept: the hand-off's generated tests (`kernelwright.handoff`) and the coder's
quick check (`tools.evaluation.Evaluations.quick_variants`) both build their variants here.

    small  the largest size constant halved until the inputs are small (the batch of 16 stays 16 while a row
           of 393216 becomes 4096): quick to run, even in Triton's interpreter
    odd    the small sizes times 3/4, made odd (never a power of two), and the weights' sizes (ints only
           get_init_inputs reads: KernelBench's hidden_size, out_features) made odd too: a kernel that assumes
           its sizes are a multiple of its block size shows it here
    tail   the problem's own sizes, its largest constant set to a multiple of 1024 plus 37 (never above its real
           value) and the other constants halved while the inputs exceed `TAIL_TARGET`: the real-size path of a
           kernel (several chunks per row, a strategy chosen by size) with a ragged last block. `small` and
           `odd` shrink the rows, so a multi-chunk path that only runs beyond a few thousand elements is never
           exercised by them; here it is, with 37 lanes in its last block of any power-of-two size >= 64.

A variant the reference refuses (it raises, or its output is not finite) is dropped with the reason. The
problem's code is run here (the user's own trusted code, as in the trusted process of the evaluator); no
candidate code is ever imported or run here. Imports nothing above `evaluators`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .problem import problem_from_source

MIN_SIZE = 8
"""a module-level int read by get_inputs() counts as a size when it is at least this (smaller ones are axes,
kernel sizes, channel counts of 3: changing them changes the problem, not its size)"""
SMALL_TARGET = 1 << 16
"""input elements the small shape variant aims at (the same factor divides every size constant)"""
TAIL_BLOCK = 1024
"""the block the tail variant's largest size is a multiple of (plus `TAIL_REMAINDER`)"""
TAIL_REMAINDER = 37
"""odd, and below 64: a last block of any power-of-two size from 64 up holds 37 valid lanes"""
TAIL_TARGET = 1 << 20
"""input elements above which the tail variant halves its other size constants"""
TAIL_MIN_SIDE = 64
"""the least size the tail variant makes odd at its real magnitude when no size reaches a block plus its remainder"""
VARIANTS = ("small", "odd", "tail")
"""every variant's name, in the order they are built"""


@dataclass
class Shape:
    """A set of sizes to run at: the problem's own (`sizes` empty), or a variant of its size constants."""

    name: str
    sizes: dict[str, int]
    elements: int | None
    """input elements of get_inputs() at these sizes (None: could not be counted)"""

    def label(self) -> str:
        """`small (batch_size=16, dim=4096)`, or `problem shapes` for the problem's own."""
        if not self.sizes:
            return "problem shapes"
        return f"{self.name} ({', '.join(f'{k}={v}' for k, v in self.sizes.items())})"


def size_constants(module: Any) -> dict[str, int]:
    """The module-level ints that get_inputs() reads and that look like sizes (KernelBench's batch_size, dim)."""
    fn = getattr(module, "get_inputs", None)
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    found = {}
    for n in code.co_names:
        v = module.__dict__.get(n)
        if type(v) is int and v >= MIN_SIZE:
            found[n] = v
    return dict(sorted(found.items()))


def fixed_constants(module: Any) -> dict[str, int]:
    """The size-like module-level ints that only get_init_inputs() reads (KernelBench's hidden_size, out_features:
    the shapes of the model's weights). Only the odd variant changes them, each made odd where the reference
    accepts it (`_odd_weights`); the quick check names those no variant it ran changed."""
    fn = getattr(module, "get_init_inputs", None)
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    varied = size_constants(module)
    return dict(sorted((n, v) for n in code.co_names if n not in varied
                       and type(v := module.__dict__.get(n)) is int and v >= MIN_SIZE))


def module_at(source: str, path: str, sizes: dict[str, int]) -> Any:
    """A fresh execution of the problem with its size constants set (as the generated tests do it)."""
    return problem_from_source(source, path, sizes=sizes).module


def count_elements(source: str, path: str, sizes: dict[str, int]) -> int | None:
    """Input elements of get_inputs() at these sizes, counted on the meta device (nothing is allocated)."""
    try:
        module = module_at(source, path, sizes)
        with torch.device("meta"):
            inputs = module.get_inputs()
        return sum(x.numel() for x in inputs if isinstance(x, torch.Tensor))
    except Exception:  # noqa: BLE001 - a problem that cannot be counted this way (e.g. it calls .cuda())
        return None


def accepts(source: str, path: str, sizes: dict[str, int]) -> str | None:
    """Whether the reference runs at these sizes on the CPU with finite outputs: None if so, else why not."""
    try:
        module = module_at(source, path, sizes)
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(0)
            model = module.Model(*module.get_init_inputs())
            outs = model(*module.get_inputs())
    except Exception as e:  # noqa: BLE001 - the problem's own code refusing a size is the answer
        text = str(e).strip().splitlines()
        return f"the reference raised {type(e).__name__}: {(text[0] if text else '')[:200]}"
    outs = outs if isinstance(outs, (tuple, list)) else [outs]
    for o in outs:
        if not isinstance(o, torch.Tensor):
            return f"the reference returned a {type(o).__name__}"
        if o.is_floating_point() and not bool(torch.isfinite(o).all()):
            return "the reference's output is not finite"
    return None


def _small(source: str, path: str, sizes: dict[str, int], own: int | None) -> dict[str, int]:
    # halve the largest size until the inputs are small (and at least four times smaller)
    small = dict(sizes)
    for _ in range(256):
        k = max(small, key=lambda name: small[name])
        if small[k] <= 1:
            break
        small[k] //= 2
        n = count_elements(source, path, small)
        if n is None:
            return {name: max(1, v // 4) for name, v in sizes.items()}
        if n <= SMALL_TARGET and (own is None or 4 * n <= own):
            break
    return small


def _tail(source: str, path: str, sizes: dict[str, int], fragile: set[str] = frozenset()) -> dict[str, int] | str:
    """The tail variant's sizes, or why there is none. A size in `fragile` is never halved or made odd."""
    k = max(sizes, key=lambda name: sizes[name])
    tail = dict(sizes)
    if sizes[k] >= TAIL_BLOCK + TAIL_REMAINDER:
        tail[k] = (sizes[k] - TAIL_REMAINDER) // TAIL_BLOCK * TAIL_BLOCK + TAIL_REMAINDER
        kept = [k]
    else:
        # no one size is long (a 512 x 512 image): the two largest sizes, whose product a kernel usually walks
        # as one row, made odd at their real magnitude (512 -> 511), so that row ends in a ragged block
        kept = sorted((n for n in sizes if n not in fragile), key=lambda name: -sizes[name])[:2]
        kept = [name for name in kept if sizes[name] >= TAIL_MIN_SIDE]
        if not kept:
            return (f"no size constant reaches {TAIL_MIN_SIDE} (the largest is {k}={sizes[k]}): small and odd cover "
                    "a tail that short")
        for name in kept:
            tail[name] = sizes[name] - 1 if sizes[name] % 2 == 0 else sizes[name] - 2
    others = [name for name in tail if name not in kept and name not in fragile]
    for _ in range(256):
        n = count_elements(source, path, tail)
        big = [name for name in others if tail[name] > 1]
        if n is None or n <= TAIL_TARGET or not big:
            break
        j = max(big, key=lambda name: tail[name])
        tail[j] //= 2
    return tail


def _odd_of(v: int) -> int:
    return max(1, (v * 3 // 4) | 1)


def _fragile(source: str, path: str, small: dict[str, int]) -> set[str]:
    """The size constants the reference refuses to see made odd (a channel count a group count must divide): each
    tried alone at the small sizes. The odd and tail variants leave these as they are."""
    return {name for name in small
            if _odd_of(small[name]) != small[name]
            and accepts(source, path, {**small, name: _odd_of(small[name])}) is not None}


def _odd_weights(source: str, path: str, odd: dict[str, int], fixed: dict[str, int]) -> dict[str, int]:
    """The odd variant's weight sizes (`fixed_constants`: read only by get_init_inputs), each made odd where the
    reference accepts it, tried alone at the odd sizes: a kernel's ragged last block of output columns or of a
    hidden dimension runs there. A weight size the reference refuses to see odd (a group count a channel count
    must be a multiple of) keeps its value."""
    return {name: _odd_of(v) for name, v in fixed.items()
            if _odd_of(v) != v and accepts(source, path, {**odd, name: _odd_of(v)}) is None}


def _odd(small: dict[str, int], fragile: set[str]) -> dict[str, int]:
    """The odd variant: every small size times 3/4 and made odd (not a power of two), so a kernel that assumes a
    multiple of its block size shows it; a size the reference refuses to see odd keeps its small value."""
    return {k: v if k in fragile else _odd_of(v) for k, v in small.items()}


def shapes_for(source: str, path: str, names: tuple[str, ...] = ("small", "odd")
               ) -> tuple[list[Shape], dict[str, str], dict[str, int]]:
    """The problem's own shape and, where its size constants allow, the variants `names` (of `VARIANTS`) that
    the reference accepts. Returns (shapes, dropped variants and why, the size constants). The hand-off's
    tests take the default (small and odd); the coder's quick check may ask for all three."""
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown shape variant {unknown[0]!r} (the variants are {', '.join(VARIANTS)})")
    module = problem_from_source(source, path).module
    sizes = size_constants(module)
    own = Shape("problem", {}, count_elements(source, path, {}))
    if not sizes:
        return [own], {}, sizes
    small = _small(source, path, sizes, own.elements)
    fragile = _fragile(source, path, small) if ("odd" in names or "tail" in names) else set()
    odd = _odd(small, fragile)
    weights = _odd_weights(source, path, odd, fixed_constants(module)) if "odd" in names else {}
    built: dict[str, dict[str, int] | str] = {"small": small, "odd": {**odd, **weights}}
    if "tail" in names:
        built["tail"] = _tail(source, path, sizes, fragile)
    shapes, dropped, seen = [own], {}, [sizes]
    for name in VARIANTS:
        s = built.get(name)
        if name not in names or s is None:
            continue
        if isinstance(s, str):
            dropped[name] = s
            continue
        if s in seen:
            continue
        why = accepts(source, path, s)
        if why and name == "odd" and weights:  # the weight sizes made odd together were refused: without them
            s = odd
            why = accepts(source, path, s)
        if why:
            dropped[name] = why
            continue
        seen.append(s)
        shapes.append(Shape(name, s, count_elements(source, path, s)))
    return shapes, dropped, sizes
