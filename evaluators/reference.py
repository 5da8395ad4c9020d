"""The trusted reference: inputs from a secret seed, expected outputs, and the tolerance they imply.

Lives in the trusted process and never shares memory with a candidate: candidates get copies of the
inputs and of the (re-randomised) parameters as plain tensors; the expected outputs never leave here.
The expected output ("gold") is the problem's Model run in float64 on the same inputs and parameters;
the problem's own precision ("native") is run too, so the tolerance is never tighter than PyTorch's own
error against float64 (an honest kernel must not be rejected for being as exact as PyTorch).
"""

from __future__ import annotations

import copy
import math
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .compare import compare, degenerate_outputs
from .inputs import FAMILIES, TEST_FAMILY, derive_seed, rerandomize_parameters, seeded_call, transform
from .problem import Precision, Problem, ProblemError, _one_line

log = logging.getLogger(__name__)

CALIBRATION_MARGIN = 2.0
MAX_WIDENING = 10.0


@dataclass
class Trial:
    """One input set and its expected outputs."""

    family: str
    index: int
    inputs: list[Any]  # on the reference device, the problem's (possibly cast) dtype
    gold: list[torch.Tensor]  # float64 (or the output's own integer dtype)
    out_meta: list[dict[str, Any]]  # dtype/shape/stride of the native reference outputs
    tolerance: float = 0.0  # set by the battery: the precision's tolerance, widened for this family if needed


@dataclass
class TrialBattery:
    trials: list[Trial]
    tolerance: float  # the base family's (what results report)
    notes: list[str] = field(default_factory=list)
    problem_flags: list[str] = field(default_factory=list)
    skipped_families: dict[str, str] = field(default_factory=dict)


def flatten_outputs(value: Any) -> list[Any]:
    if isinstance(value, (tuple, list)):
        return list(value)
    return [value]


@torch.no_grad()
def _cast_inputs(inputs: list[Any], device: torch.device, dtype: torch.dtype | None) -> list[Any]:
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            x = x.to(device)
            if dtype is not None and x.is_floating_point():
                x = x.to(dtype)
        out.append(x)
    return out


def _to_double(inputs: list[Any]) -> list[Any]:
    return [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]


class tf32_mode:
    """Context manager: allow or forbid TF32 in PyTorch's matmul and cuDNN for the duration."""

    def __init__(self, allow: bool) -> None:
        self.allow = allow

    def __enter__(self) -> None:
        self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = self.allow
        torch.backends.cudnn.allow_tf32 = self.allow

    def __exit__(self, *exc: object) -> None:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved


class ReferenceSession:
    """The problem's Model on one device, with parameters re-randomised from the secret seed."""

    def __init__(self, problem: Problem, device: torch.device, precision: Precision | None = None,
                 seed: int | None = None) -> None:
        self.problem = problem
        self.device = device
        self.precision = precision or problem.precision
        self.seed = secrets.randbits(63) if seed is None else seed
        self._batteries = 0
        init = problem.get_init_inputs()
        try:
            model = seeded_call(lambda: problem.model_cls(*init), derive_seed(self.seed, "init"))
        except Exception as e:
            raise ProblemError(f"{problem.path}: Model(*get_init_inputs()) raised {type(e).__name__}: {_one_line(e)}") from e
        rerandomize_parameters(model, derive_seed(self.seed, "params"))
        cast = self.precision.cast_dtype
        self.native: nn.Module = model.to(device=device, dtype=cast) if cast else model.to(device)
        self.gold_model: nn.Module | None
        try:
            self.gold_model = copy.deepcopy(self.native).double()
        except Exception as e:  # a model that cannot be copied or cast: fall back to the native result
            log.info("no float64 reference for %s: %s", problem.path, e)
            self.gold_model = None
        self.init_inputs = init
        self.state = {k: v.detach().cpu() for k, v in self.native.state_dict().items()}

    # -- trials ---------------------------------------------------------------------------------------

    def _run(self, model: nn.Module, inputs: list[Any], tf32: bool) -> list[Any]:
        with torch.no_grad(), tf32_mode(tf32):
            outs = flatten_outputs(model(*inputs))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return outs

    def _draw(self, family: str, index: int, battery: int) -> list[list[Any]]:
        seed = derive_seed(self.seed, "battery", battery, family, index)
        if family == TEST_FAMILY:
            return seeded_call(self.problem.get_test_inputs, seed)
        base = seeded_call(self.problem.get_inputs, seed)
        return [transform(family, base, derive_seed(seed, "transform"))]

    def battery(self, trials_per_family: int, families: tuple[str, ...] = FAMILIES,
                base_tolerance: float | None = None) -> TrialBattery:
        """Fresh input sets for every family (new values every call) with their expected outputs."""
        self._batteries += 1
        b = self._batteries
        tol = base_tolerance or self.problem.tolerance_override or self.precision.tolerance
        fams = list(families) + ([TEST_FAMILY] if self.problem.has_test_inputs else [])
        trials: list[Trial] = []
        skipped: dict[str, str] = {}
        notes: list[str] = []
        base_tol = tol
        for family in fams:
            n = 1 if family == TEST_FAMILY else trials_per_family
            fam_trials: list[Trial] = []
            fam_err = 0.0
            for i in range(n):
                for raw in self._draw(family, i, b):
                    made = self._make_trial(family, len(fam_trials), raw)
                    if made is None:
                        skipped[family] = "the reference itself gives NaN or Inf on this family"
                        break
                    fam_trials.append(made[0])
                    fam_err = max(fam_err, made[1])
                if family in skipped:
                    break
            if family in skipped:
                if family == "base":
                    raise ProblemError(f"{self.problem.path}: the reference output is NaN or Inf on the problem's own inputs")
                continue
            # Never hold a candidate to a tighter tolerance than PyTorch's own result in this precision
            # meets, family by family; but a family on which the reference itself is far off says nothing
            # (widening for it would loosen the check), so it is skipped instead.
            fam_tol = max(base_tol, CALIBRATION_MARGIN * fam_err)
            if fam_tol > MAX_WIDENING * base_tol and family != "base":
                skipped[family] = (f"PyTorch's own {self.precision.value} reference deviates by {fam_err:.3g} from "
                                   "float64 on this family: too imprecise to judge against")
                continue
            if fam_tol > base_tol:
                notes.append(f"{family}: tolerance widened from {base_tol:.3g} to {fam_tol:.3g}: PyTorch's own "
                             f"{self.precision.value} reference deviates by {fam_err:.3g} from the float64 result")
            for t in fam_trials:
                t.tolerance = fam_tol
            if family == "base":
                tol = fam_tol
            trials.extend(fam_trials)
        base_trials = [t for t in trials if t.family == "base"]
        flags = []
        if base_trials:
            # Two trials are enough to tell a degenerate problem; more only costs time.
            per_trial = [set(degenerate_outputs(t.gold, t.inputs, tol)) for t in base_trials[:2]]
            flags = sorted(set.intersection(*per_trial))
        return TrialBattery(trials, tol, notes, flags, skipped)

    def timing_pool(self, reps: int, budget_bytes: int) -> list[Trial]:
        """Input sets for timing (the problem's own distribution, fresh values) with expected outputs.

        As many sets as repetitions when they fit in `budget_bytes`, so no repetition sees warm data."""
        self._batteries += 1
        b = self._batteries
        first = self._pool_trial(b, 0)
        per_set = sum(x.numel() * x.element_size() for x in first.inputs if isinstance(x, torch.Tensor))
        per_set += sum(g.numel() * g.element_size() for g in first.gold)
        n = max(2, min(reps, budget_bytes // max(per_set, 1)))
        return [first] + [self._pool_trial(b, i) for i in range(1, n)]

    def _pool_trial(self, battery: int, i: int) -> Trial:
        raw = seeded_call(self.problem.get_inputs, derive_seed(self.seed, "timing", battery, i))
        made = self._make_trial("base", i, raw)
        if made is None:
            raise ProblemError(f"{self.problem.path}: the reference output is NaN or Inf on the problem's own inputs")
        return made[0]

    def _make_trial(self, family: str, index: int, raw: list[Any]) -> tuple[Trial, float] | None:
        inputs = _cast_inputs(raw, self.device, self.precision.cast_dtype)
        try:
            native = self._run(self.native, inputs, self.precision.allows_tf32)
        except Exception as e:
            if family == "base":
                raise ProblemError(f"{self.problem.path}: Model.forward raised {type(e).__name__}: {_one_line(e)}") from e
            return None
        for i, o in enumerate(native):
            if not isinstance(o, torch.Tensor):
                raise ProblemError(
                    f"{self.problem.path}: Model.forward returned a {type(o).__name__} (output {i}), not a tensor"
                )
        gold: list[torch.Tensor] = []
        if self.gold_model is not None:
            try:
                gold = [g.double() if g.is_floating_point() else g
                        for g in self._run(self.gold_model, _to_double(inputs), tf32=False)]
            except Exception as e:
                log.info("float64 reference failed for %s (%s); using the native result", self.problem.path, e)
                self.gold_model = None
        if not gold or len(gold) != len(native):
            gold = [o.double() if o.is_floating_point() else o for o in native]
        if any(g.is_floating_point() and not bool(torch.isfinite(g).all()) for g in gold):
            if family == "base" and all(not bool(torch.isfinite(g).any()) for g in gold if g.is_floating_point()):
                return None
            if family != "base":
                return None
        err = 0.0
        for o, g in zip(native, gold):
            if o.is_floating_point():
                c = compare(o, g, 1.0)
                if math.isfinite(c.max_rel):
                    err = max(err, c.max_rel)
        meta = [{"dtype": o.dtype, "shape": list(o.shape), "stride": list(o.stride()), "contiguous": o.is_contiguous()}
                for o in native]
        return Trial(family, index, inputs, gold, meta), err
