"""The trusted reference: inputs from a secret seed, expected outputs, and the tolerance they imply.

Lives in the trusted process and never shares memory with a candidate: candidates get copies of the
inputs and of the (re-randomised) parameters as plain tensors; the expected outputs never leave here.
The expected output ("gold") is the problem's Model run in float64 on the same inputs and parameters;
the problem's own precision ("native") is run too, so the tolerance is never tighter than PyTorch's own
error against float64 (an honest kernel must not be rejected for being as exact as PyTorch).
"""

from __future__ import annotations

import copy
import logging
import math
import secrets
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .compare import compare
from .inputs import FAMILIES, TEST_FAMILY, derive_seed, rerandomize_parameters, seeded_call, transform
from .problem import Precision, Problem, ProblemError, one_line

log = logging.getLogger(__name__)

CALIBRATION_MARGIN = 2.0
CALIBRATION_TRIALS = 3
"""trials per family whose PyTorch-vs-float64 error is measured (the largest sets the family's tolerance)"""
MAX_WIDENING = 10.0


@dataclass
class Trial:
    """One input set and its expected outputs, made when its turn comes and dropped after it."""

    family: str
    index: int
    inputs: list[Any]  # on the reference device, the problem's (possibly cast) dtype
    gold: list[torch.Tensor]  # float64 (or the output's own integer dtype); the native result under "native" gold
    out_meta: list[dict[str, Any]]  # dtype/shape/stride of the native reference outputs
    tolerance: float = 0.0  # the precision's tolerance, widened for this family if PyTorch itself needs it
    native_error: float = 0.0  # PyTorch's own error in the problem's precision against the gold
    native_measured: bool = False  # whether `native_error` was measured on this trial's inputs
    calibrating: bool = False  # one of the family's first trials, which set its tolerance


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


GOLD_FLOAT64 = "float64"
GOLD_NATIVE = "native"


class ReferenceSession:
    """The problem's Model on one device, with parameters re-randomised from the secret seed.

    Trials are made one at a time (`trial`), on the device: inputs drawn there from the seed, the gold
    output in float64 (or, when the memory plan says float64 does not fit, PyTorch's own result in the
    problem's precision: `gold_precision`), PyTorch's own error against it, and the tolerance that error
    implies. Nothing of a trial outlives its use, so the memory a problem needs is one trial's, however many
    trials are run."""

    def __init__(self, problem: Problem, device: torch.device, precision: Precision | None = None,
                 seed: int | None = None) -> None:
        self.problem = problem
        self.device = device
        self.precision = precision or problem.precision
        self.seed = secrets.randbits(63) if seed is None else seed
        self._batteries = 0
        self.gold_precision = GOLD_FLOAT64
        self.gold_note: str | None = None
        self.forward_times: list[float] = []
        self.family_error: dict[str, float] = {}
        # per sensitive family: draws skipped because PyTorch itself was too far off on them, and its worst error
        self.skipped_draws: dict[str, int] = {}
        self.worst_skipped: dict[str, float] = {}
        # per family (any family): draws skipped because PyTorch's own result had NaN or Inf the gold does not
        # have there (`_skip_non_finite`), by index
        self.non_finite_draws: dict[str, list[int]] = {}
        self._calibrated: dict[str, int] = {}
        self.skipped: dict[str, str] = {}
        self.notes: list[str] = []
        self._test_sets: int | None = None
        init = problem.get_init_inputs()
        try:
            model = seeded_call(lambda: problem.model_cls(*init), derive_seed(self.seed, "init"), device)
        except ProblemError:
            raise
        except Exception as e:
            raise ProblemError(f"{problem.path}: Model(*get_init_inputs()) raised {type(e).__name__}: {one_line(e)}") from e
        cast = self.precision.cast_dtype
        model = model.to(device=device, dtype=cast) if cast else model.to(device)
        self.kept_buffers = rerandomize_parameters(model, derive_seed(self.seed, "params"))
        self.native: nn.Module = model
        self._gold_model: nn.Module | None = None
        self._gold_failed: str | None = None
        self.init_inputs = init
        self.state = {k: v.detach().cpu() for k, v in self.native.state_dict().items()}

    @property
    def base_tolerance(self) -> float:
        tol = self.problem.tolerance_override or self.precision.tolerance
        # Against PyTorch's own result the gold carries an error of its own, up to what any honest result
        # may have: the tolerance doubles to account for it.
        return 2 * tol if self.gold_precision == GOLD_NATIVE else tol

    def family_tolerance(self, family: str) -> float:
        """The precision's tolerance, widened to what PyTorch's own result needs on this family so far."""
        return max(self.base_tolerance, CALIBRATION_MARGIN * self.family_error.get(family, 0.0))

    def sensitive(self, family: str) -> bool:
        """Whether PyTorch's own result deviates from float64 beyond the base tolerance on this family (its
        tolerance was widened): such a family is calibrated on every trial."""
        return CALIBRATION_MARGIN * self.family_error.get(family, 0.0) > self.base_tolerance

    def use_native_gold(self, why: str) -> None:
        self.gold_precision = GOLD_NATIVE
        self.gold_note = why
        self._gold_model = None

    @property
    def forward_s(self) -> float | None:
        """The reference forward's typical wall time (seconds, synchronised), once one has run."""
        if not self.forward_times:
            return None
        xs = sorted(self.forward_times)
        return xs[len(xs) // 2]

    def _gold(self) -> nn.Module | None:
        if self.gold_precision != GOLD_FLOAT64 or self._gold_failed:
            return None
        if self._gold_model is None:
            try:
                self._gold_model = copy.deepcopy(self.native).double()
            except Exception as e:  # a model that cannot be copied or cast: fall back to the native result
                self._gold_failed = f"the model has no float64 version ({type(e).__name__}: {one_line(e)})"
                self.use_native_gold(self._gold_failed)
                return None
        return self._gold_model

    # -- trials ---------------------------------------------------------------------------------------

    def _run(self, model: nn.Module, inputs: list[Any], tf32: bool) -> list[Any]:
        with torch.no_grad(), tf32_mode(tf32):
            outs = flatten_outputs(model(*inputs))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return outs

    def new_battery(self) -> int:
        """A fresh label for a battery of trials: its input sets have values no earlier battery had."""
        self._batteries += 1
        return self._batteries

    def schedule(self, trials_per_family: int, families: tuple[str, ...] = FAMILIES) -> list[tuple[str, int]]:
        """The (family, index) pairs of one battery, in family order (the caller shuffles)."""
        pairs = [(f, i) for f in families for i in range(trials_per_family)]
        if self.problem.has_test_inputs:
            if self._test_sets is None:
                self._test_sets = len(seeded_call(self.problem.get_test_inputs, derive_seed(self.seed, "count"),
                                                  self.device))
            pairs += [(TEST_FAMILY, i) for i in range(self._test_sets)]
        return pairs

    def draw(self, family: str, index: int, battery: int) -> list[Any]:
        """The input set (family, index) of a battery, drawn on the device from the secret seed."""
        if family == TEST_FAMILY:
            sets = seeded_call(self.problem.get_test_inputs, derive_seed(self.seed, "battery", battery, family),
                               self.device)
            raw = sets[index]
        else:
            seed = derive_seed(self.seed, "battery", battery, family, index)
            base = seeded_call(self.problem.get_inputs, seed, self.device)
            # the first heavy-tailed draw of a battery puts its extremes at the pivots (inputs.py says why)
            raw = transform(family, _cast_inputs(base, self.device, None), derive_seed(seed, "transform"),
                            pivots=index == 0)
        return _cast_inputs(raw, self.device, self.precision.cast_dtype)

    def trial(self, family: str, index: int, battery: int) -> Trial | None:
        """Make one trial, or None when its family must be skipped (`skipped` says why)."""
        if family in self.skipped:
            return None
        inputs = self.draw(family, index, battery)
        made = self._make_trial(family, index, inputs)
        if made is None:
            if family == "base":
                raise ProblemError(f"{self.problem.path}: the reference output is NaN or Inf on the problem's own inputs")
            self.skipped[family] = "the reference itself gives NaN or Inf on this family"
            return None
        trial, err = made
        if not math.isfinite(err):
            return self._skip_non_finite(trial)
        base_tol = self.base_tolerance
        if trial.native_measured and not trial.calibrating:
            return self._judge_own_draw(trial, err, base_tol)
        # Never hold a candidate to a tighter tolerance than PyTorch's own result in this precision meets
        # on this family; but a family on which the reference itself is far off says nothing (widening
        # for it would loosen the check), so it is skipped instead.
        fam_err = max(self.family_error.get(family, 0.0), err)
        self.family_error[family] = fam_err
        fam_tol = self.family_tolerance(family)
        if fam_tol > MAX_WIDENING * base_tol and family != "base":
            self.skipped[family] = (f"PyTorch's own {self.precision.value} reference deviates by {fam_err:.3g} from "
                                    "float64 on this family: too imprecise to judge against")
            return None
        if fam_tol > base_tol:
            note = (f"{family}: tolerance widened from {base_tol:.3g} to {fam_tol:.3g}: PyTorch's own "
                    f"{self.precision.value} reference deviates by {fam_err:.3g} from the float64 result")
            self.notes = [n for n in self.notes if not n.startswith(f"{family}:")] + [note]
        trial.tolerance = fam_tol
        return trial

    def _judge_own_draw(self, trial: Trial, err: float, base_tol: float) -> Trial | None:
        """A sensitive family after its calibration: this draw's own PyTorch error sets its tolerance (never
        below the family's), and a draw on which PyTorch itself is too far off is skipped alone (the family
        stays judged on its other draws). PyTorch's result with NaN or Inf the gold does not have is the farthest
        off of all: skipped, whatever the family (`_skip_non_finite`)."""
        if not math.isfinite(err):
            return self._skip_non_finite(trial)
        family = trial.family
        own = CALIBRATION_MARGIN * err
        if own > MAX_WIDENING * base_tol and family != "base":
            n = self.skipped_draws[family] = self.skipped_draws.get(family, 0) + 1
            note = (f"{family}: {n} draw(s) skipped: PyTorch's own {self.precision.value} reference deviated from "
                    f"float64 by up to {max(err, self.worst_skipped.get(family, 0.0)):.3g} on them")
            self.worst_skipped[family] = max(err, self.worst_skipped.get(family, 0.0))
            self.notes = [x for x in self.notes if not (x.startswith(f"{family}: ") and "deviated from" in x)] + [note]
            return None
        trial.tolerance = max(self.family_tolerance(family), own)
        return trial

    def _skip_non_finite(self, trial: Trial) -> None:
        """Skip a draw on which PyTorch's own result in the problem's precision has NaN or Inf where the float64
        gold has none (`exp(x) / sum(exp(x))` overflowing in fp32): PyTorch is as far off there as can be, and a
        kernel as faithful as PyTorch is too, so the draw tells nothing about the kernel. Never read as zero
        error (that would fail the faithful kernel, `nan_output`), never folded into the family's tolerance
        (an infinite tolerance would pass anything finite); the family stays judged on its other draws, and
        the notes say which draws went and why. Any family, the base one included: no tolerance is widened."""
        family = trial.family
        seen = self.non_finite_draws.setdefault(family, [])
        seen.append(trial.index)
        shown = ", ".join(map(str, seen[-6:])) + (", ..." if len(seen) > 6 else "")
        note = (f"{family}: {len(seen)} draw(s) skipped ({family} draw {shown}): PyTorch's own "
                f"{self.precision.value} result has NaN or Inf where the float64 result is finite, so such a draw "
                "tells nothing about the kernel")
        self.notes = [x for x in self.notes if not (x.startswith(f"{family}: ") and "NaN or Inf where" in x)] + [note]
        return None

    def family_skips(self, families: set[str], judged: set[str]) -> dict[str, str]:
        """Why each of `families` (those an evaluation scheduled) has no judged draw in it (`judged`): skipped as
        a whole (`skipped`), or every draw of it skipped alone (the draw skips' notes say why)."""
        out = dict(self.skipped)
        for family in sorted(families - judged - set(out)):
            why = [n.removeprefix(f"{family}: ") for n in self.notes
                   if n.startswith(f"{family}: ") and "draw(s) skipped" in n]
            if why:
                out[family] = "every draw skipped: " + "; ".join(why)
        return out

    def second_look(self, trial: Trial) -> tuple[str, Trial | None]:
        """A candidate failed `trial`, a draw whose PyTorch error was not measured (the family's first draws said
        it was not sensitive). Before that failure stands, measure PyTorch's own error on this very draw, as a
        sensitive family would have, and judge by the same rule (`_judge_own_draw`): ("widened", the trial with
        its tolerance at least twice PyTorch's error there), ("skip", None) when PyTorch itself is too far off on
        the draw to judge anything (any family, when PyTorch's result has NaN or Inf where the float64 gold is
        finite), or ("stands", None): nothing to widen for (the base family and the problem's own test inputs
        are never widened here; an error measured already; no float64 gold; PyTorch as close as the tolerance
        asks; no memory left to run PyTorch again)."""
        if trial.native_measured or self.gold_precision != GOLD_FLOAT64 or not trial.gold:
            return "stands", None
        try:
            native = self._run(self.native, trial.inputs, self.precision.allows_tf32)
        except Exception as e:  # noqa: BLE001 - out of memory with the candidate's outputs held, or worse
            log.info("PyTorch's own error on a failed draw could not be measured: %s", one_line(e))
            return "stands", None
        err = _native_error(native, trial.gold)
        del native
        trial.native_error, trial.native_measured = err, True
        if not math.isfinite(err):
            self._skip_non_finite(trial)
            return "skip", None
        if trial.family in ("base", TEST_FAMILY) or CALIBRATION_MARGIN * err <= trial.tolerance:
            return "stands", None
        judged = self._judge_own_draw(trial, err, self.base_tolerance)
        return ("widened", judged) if judged is not None else ("skip", None)

    def timing_inputs(self, n: int) -> list[list[Any]]:
        """`n` input sets for timing: the problem's own distribution, values no trial had."""
        b = self.new_battery()
        return [self.draw_timing(b, i) for i in range(n)]

    def draw_timing(self, battery: int, i: int) -> list[Any]:
        raw = seeded_call(self.problem.get_inputs, derive_seed(self.seed, "timing", battery, i), self.device)
        return _cast_inputs(raw, self.device, self.precision.cast_dtype)

    def gold_for(self, inputs: list[Any], native: bool = False) -> list[torch.Tensor]:
        """The expected outputs for an input set (float64, or the native result under native gold or when
        `native` asks for it: the memory plan's choice for re-checking timed outputs)."""
        gold_model = None if native else self._gold()
        if gold_model is not None:
            try:
                return [g.double() if g.is_floating_point() else g
                        for g in self._run(gold_model, _to_double(inputs), tf32=False)]
            except Exception as e:  # noqa: BLE001
                if _is_oom(e):
                    raise
                log.info("float64 reference failed for %s (%s); using the native result", self.problem.path, e)
                self.use_native_gold(f"the float64 reference failed ({type(e).__name__}: {one_line(e)})")
        return self._run(self.native, inputs, self.precision.allows_tf32)

    def _make_trial(self, family: str, index: int, inputs: list[Any]) -> tuple[Trial, float] | None:
        gold: list[torch.Tensor] = []
        gold_model = self._gold()
        if gold_model is not None:
            try:
                gold = [g.double() if g.is_floating_point() else g
                        for g in self._run(gold_model, _to_double(inputs), tf32=False)]
            except Exception as e:
                if _is_oom(e):
                    raise
                log.info("float64 reference failed for %s (%s); using the native result", self.problem.path, e)
                self.use_native_gold(f"the float64 reference failed ({type(e).__name__}: {one_line(e)})")
                gold = []
        try:
            t0 = time.perf_counter()
            native = self._run(self.native, inputs, self.precision.allows_tf32)
            self.forward_times.append(time.perf_counter() - t0)
        except Exception as e:
            if _is_oom(e):
                raise
            if family == "base":
                raise ProblemError(f"{self.problem.path}: Model.forward raised {type(e).__name__}: {one_line(e)}") from e
            return None
        for i, o in enumerate(native):
            if not isinstance(o, torch.Tensor):
                raise ProblemError(
                    f"{self.problem.path}: Model.forward returned a {type(o).__name__} (output {i}), not a tensor"
                )
        if gold and len(gold) != len(native):
            gold = []
        meta = [{"dtype": o.dtype, "shape": list(o.shape), "stride": list(o.stride()), "contiguous": o.is_contiguous()}
                for o in native]
        err = 0.0
        measured = calibrating = False
        if gold:
            # PyTorch's own error sets the family's tolerance; a few trials of a family measure it, and the
            # session keeps it (later batteries reuse it: a full comparison per trial is not needed for that).
            # A sensitive family (PyTorch itself deviates beyond the base tolerance there, e.g. sharply scaled
            # attention logits) is measured on every trial: its error depends on the draw, and a tolerance
            # calibrated on a few draws is too tight for the next, sharper one.
            calibrating = self._calibrated.get(family, 0) < CALIBRATION_TRIALS
            measured = calibrating or self.sensitive(family)
            if measured:
                err = _native_error(native, gold)
            # a draw whose PyTorch result is not finite where the gold is (skipped by `trial`) measured nothing:
            # it does not count among the family's calibration draws
            if calibrating and math.isfinite(err):
                self._calibrated[family] = self._calibrated.get(family, 0) + 1
            del native
        else:
            gold = native
        if any(g.is_floating_point() and not _all_finite(g) for g in gold):
            if family == "base" and all(not _any_finite(g) for g in gold if g.is_floating_point()):
                return None
            if family != "base":
                return None
        return Trial(family, index, inputs, gold, meta, native_error=err,
                     native_measured=measured, calibrating=calibrating), err


def _native_error(native: list[Any], gold: list[Any]) -> float:
    """PyTorch's own worst relative error against the gold, over its floating-point outputs (0 when none);
    infinite where PyTorch's result has NaN or Inf the gold does not have (or misses the gold's own): PyTorch is
    as far off there as can be, never "0" (the draw is skipped: `ReferenceSession._skip_non_finite`)."""
    err = 0.0
    for o, g in zip(native, gold):
        if isinstance(o, torch.Tensor) and o.is_floating_point():
            c = compare(o, g, 1.0)
            if c.non_finite:
                return math.inf
            if math.isfinite(c.max_rel):
                err = max(err, c.max_rel)
    return err


def _is_oom(e: BaseException) -> bool:
    return isinstance(e, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in str(e).lower()


def _count_finite(t: torch.Tensor) -> int:
    f = t.reshape(-1)
    n = torch.zeros((), dtype=torch.int64, device=f.device)
    for i in range(0, f.numel(), 1 << 24):
        n += torch.isfinite(f[i:i + (1 << 24)]).sum()
    return int(n)


def _all_finite(t: torch.Tensor) -> bool:
    return _count_finite(t) == t.numel()


def _any_finite(t: torch.Tensor) -> bool:
    return _count_finite(t) > 0
