"""How much device memory one trial of a problem needs, found without allocating any of it.

The problem's `Model`, its inputs and its forward pass are run on PyTorch's meta device, where tensors
have shapes and dtypes but no storage. A dispatch mode follows every storage that comes into being and
every one that dies, so the high-water mark of live bytes during the forward is known before a single
real byte is allocated — in the problem's own precision and again in float64 (the gold reference).
When a problem cannot run on the meta device (an op without a meta kernel, a `.item()` on data), the
estimate says so, and the caller measures one real forward instead.
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from .problem import Problem
from .torch_private import TorchDispatchMode, tree_flatten


@dataclass
class Footprint:
    """Bytes of one forward pass: what it is given and the most it holds at once."""

    input_bytes: int
    param_bytes: int
    output_bytes: int
    peak_bytes: int
    """most bytes alive at once during the forward: inputs, parameters, temporaries and outputs"""
    float_input_bytes: int = 0
    """the floating part of the inputs (what a float64 copy doubles)"""

    @property
    def transient_bytes(self) -> int:
        """What the forward itself allocates at its peak (outputs included), beyond inputs and parameters."""
        return max(self.peak_bytes - self.input_bytes - self.param_bytes, self.output_bytes)


@dataclass
class Estimate:
    """The footprint of one trial in the problem's precision and in float64, or why it is unknown."""

    native: Footprint | None = None
    gold: Footprint | None = None
    """the same forward in float64 (the gold reference); None when the model cannot be cast"""
    why_unknown: str | None = None
    out_meta: list[dict[str, Any]] = field(default_factory=list)


class _LiveBytes(TorchDispatchMode):
    """Follows the storages created under it and keeps the high-water mark of the bytes alive."""

    def __init__(self, live: int) -> None:
        super().__init__()
        self.live = live
        self.peak = live
        self._refs: dict[int, int] = {}  # storage key -> live tensors on it
        self._sizes: dict[int, int] = {}

    def adopt(self, t: torch.Tensor) -> None:
        """Count a tensor that already exists (an input, a parameter) as alive, without adding its bytes."""
        key = _key(t)
        if key not in self._sizes:
            self._sizes[key] = 0  # already in `live`; it is never freed during the forward
        self._refs[key] = self._refs.get(key, 0) + 1
        weakref.finalize(t, self._drop, key)

    def _drop(self, key: int) -> None:
        n = self._refs.get(key, 0) - 1
        if n > 0:
            self._refs[key] = n
            return
        self._refs.pop(key, None)
        self.live -= self._sizes.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        flat, _ = tree_flatten(out)
        for t in flat:
            if not isinstance(t, torch.Tensor):
                continue
            key = _key(t)
            if key not in self._sizes:
                size = t.untyped_storage().nbytes()
                self._sizes[key] = size
                self.live += size
                self.peak = max(self.peak, self.live)
            self._refs[key] = self._refs.get(key, 0) + 1
            weakref.finalize(t, self._drop, key)
        return out


def _key(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


def _nbytes(xs: list[Any]) -> int:
    return sum(x.untyped_storage().nbytes() for x in _unique_storages(xs))


def _unique_storages(xs: list[Any]) -> list[torch.Tensor]:
    seen: set[int] = set()
    out = []
    for x in xs:
        if isinstance(x, torch.Tensor) and _key(x) not in seen:
            seen.add(_key(x))
            out.append(x)
    return out


def _to_double(xs: list[Any]) -> list[Any]:
    return [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs]


def _trace(model: torch.nn.Module, inputs: list[Any]) -> tuple[Footprint, list[Any]]:
    tensors = list(model.parameters()) + list(model.buffers())
    in_bytes, p_bytes = _nbytes(inputs), _nbytes(tensors)
    mode = _LiveBytes(in_bytes + p_bytes)
    with torch.no_grad(), mode:
        for t in _unique_storages(list(inputs) + tensors):
            mode.adopt(t)
        out = model(*inputs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    fp = Footprint(input_bytes=in_bytes, param_bytes=p_bytes,
                   output_bytes=_nbytes([o for o in outs if isinstance(o, torch.Tensor)]), peak_bytes=mode.peak,
                   float_input_bytes=_nbytes([x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]))
    return fp, outs


def meta_problem(problem: Problem, cast: torch.dtype | None = None) -> tuple[torch.nn.Module, list[Any]]:
    """The problem's model and one input set on the meta device: shapes and dtypes, no storage."""
    with torch.device("meta"):
        model = problem.model_cls(*problem.get_init_inputs())
        inputs = problem.get_inputs()
    model = model.to("meta")
    inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]
    if cast is not None:
        model = model.to(cast)
        inputs = [x.to(cast) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    return model, inputs


def estimate(problem: Problem, cast: torch.dtype | None = None) -> Estimate:
    """The footprint of one trial of `problem`, traced on the meta device (no real memory is touched)."""
    est = Estimate()
    try:
        model, inputs = meta_problem(problem, cast)
        est.native, outs = _trace(model, inputs)
        est.out_meta = [{"dtype": o.dtype, "shape": list(o.shape)} for o in outs if isinstance(o, torch.Tensor)]
    except Exception as e:  # noqa: BLE001 - anything the meta device cannot run: measure instead
        est.why_unknown = f"the forward cannot be traced on the meta device ({type(e).__name__}: {str(e)[:200]})"
        return est
    try:
        gold_model = copy.deepcopy(model).double()
        est.gold, _ = _trace(gold_model, _to_double(inputs))
    except Exception:  # noqa: BLE001 - no float64 version of this model: the gold is the native result
        est.gold = None
    return est
