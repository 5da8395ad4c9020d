"""Problems in KernelBench format, loaded in the trusted process only.

A problem file defines `Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`; optional hooks are
`get_test_inputs()`, `PRECISION`, `TOLERANCE` and `ALLOW_STREAMS`. Its source is read into memory
once, before any candidate runs, so nothing a candidate does to the file later can change the judge.
Every defect is reported as a `ProblemError` whose message is one sentence naming the file.
"""

from __future__ import annotations

import hashlib
import types
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn


class ProblemError(Exception):
    """The problem file is unusable; the message is one sentence naming the file and what is wrong."""


class Precision(StrEnum):
    """The precision contract: what arithmetic a candidate (and the baselines) may use."""

    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"

    @property
    def tolerance(self) -> float:
        """Per-element tolerance, relative to |ref| + rms(ref) (docs/verifier.md, 'Numbers held to')."""
        return {"fp32": 1e-4, "tf32": 2e-3, "bf16": 1e-2, "fp16": 1e-2}[self.value]

    @property
    def cast_dtype(self) -> torch.dtype | None:
        """The dtype floating inputs and parameters are cast to, or None to keep the problem's own."""
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.value)

    @property
    def allows_tf32(self) -> bool:
        return self is Precision.TF32


@dataclass
class Problem:
    """A loaded, validated problem. `module` is the problem's namespace, executed from `source`."""

    path: str
    source: str
    module: types.ModuleType
    precision: Precision
    tolerance_override: float | None = None
    allow_streams: bool = False
    has_test_inputs: bool = False
    digest: str = field(default="")
    sizes: dict[str, int] = field(default_factory=dict)
    """size constants set after the module ran (a shape variant, `evaluators.variants`); empty: its own"""

    @property
    def name(self) -> str:
        return Path(self.path).stem if Path(self.path).stem != "problem" else Path(self.path).parent.name

    @property
    def model_cls(self) -> type[nn.Module]:
        return self.module.Model

    def get_init_inputs(self) -> list[Any]:
        return list(self._call("get_init_inputs"))

    def get_inputs(self) -> list[Any]:
        return list(self._call("get_inputs"))

    def get_test_inputs(self) -> list[list[Any]]:
        """Extra input sets the problem asks to be checked (a list of input lists, or one input list)."""
        sets = self._call("get_test_inputs")
        sets = list(sets)
        if sets and isinstance(sets[0], torch.Tensor):
            return [sets]
        return [list(s) for s in sets]

    def _call(self, name: str) -> Any:
        fn: Callable[[], Any] = getattr(self.module, name)
        try:
            value = fn()
        except Exception as e:
            raise ProblemError(f"{self.path}: {name}() raised {type(e).__name__}: {one_line(e)}") from e
        if not isinstance(value, (list, tuple)):
            raise ProblemError(f"{self.path}: {name}() must return a list, not {type(value).__name__}")
        return value


def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else "")[:300]


def load_problem(path: str | Path, precision: str | None = None) -> Problem:
    """Read, execute and validate a problem file. Raises ProblemError with one clear sentence."""
    p = Path(path)
    shown = str(path)
    if not p.is_file():
        raise ProblemError(f"{shown}: no such problem file")
    try:
        source = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ProblemError(f"{shown}: cannot be read ({one_line(e)})") from e
    return problem_from_source(source, shown, precision)


def problem_from_source(source: str, path: str, precision: str | None = None,
                        sizes: dict[str, int] | None = None) -> Problem:
    """Execute and validate a problem's source. `sizes`: module-level int constants (the size constants
    `get_inputs()` reads, `evaluators.variants`) set to these values after the module ran, as if the file said
    so: the problem at a shape variant. Its digest then differs from the problem's own."""
    sizes = dict(sizes or {})
    digest = hashlib.sha256((source + (f"\0{sorted(sizes.items())}" if sizes else "")).encode()).hexdigest()[:16]
    try:
        code = compile(source, path, "exec")
    except SyntaxError as e:
        raise ProblemError(f"{path}: line {e.lineno}: syntax error: {e.msg}") from e
    module = types.ModuleType(f"kw_problem_{digest}")
    module.__file__ = path
    try:
        exec(code, module.__dict__)  # noqa: S102 - the problem is the user's own trusted code
    except Exception as e:
        raise ProblemError(f"{path} could not be imported: {type(e).__name__}: {one_line(e)}") from e
    for k, v in sizes.items():
        if type(module.__dict__.get(k)) is not int:
            raise ProblemError(f"{path}: has no module-level integer {k!r} to set to {v!r}")
        if type(v) is not int or v < 1:
            raise ProblemError(f"{path}: {k} must be set to a positive integer, not {v!r}")
        setattr(module, k, v)

    model = getattr(module, "Model", None)
    if not (isinstance(model, type) and issubclass(model, nn.Module)):
        raise ProblemError(f"{path}: defines no class Model(nn.Module)")
    for fn in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, fn, None)):
            raise ProblemError(f"{path}: defines no function {fn}()")

    declared = getattr(module, "PRECISION", None)
    chosen = precision or declared or "fp32"
    try:
        prec = Precision(str(chosen).lower())
    except ValueError as e:
        raise ProblemError(
            f"{path}: unknown precision {chosen!r} (use one of {', '.join(p.value for p in Precision)})"
        ) from e
    tol = getattr(module, "TOLERANCE", None)
    if tol is not None and (not isinstance(tol, (int, float)) or not 0 < float(tol) < 1):
        raise ProblemError(f"{path}: TOLERANCE must be a number between 0 and 1, not {tol!r}")
    return Problem(
        path=path,
        source=source,
        module=module,
        precision=prec,
        tolerance_override=float(tol) if tol is not None else None,
        allow_streams=bool(getattr(module, "ALLOW_STREAMS", False)),
        has_test_inputs=callable(getattr(module, "get_test_inputs", None)),
        digest=digest,
        sizes=sizes,
    )
