"""Verdicts of the evaluation service: the stable, JSON-serialisable boundary every other layer reads.

Owns `Reason` (the machine-readable codes), `Check`, `EvalResult` and the bounding/redaction of any
text that may reach a language model or a user. Imports nothing of the rest of kernelwright.
"""

from __future__ import annotations

import os
import re
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DETAIL_LIMIT = 2000
"""Longest `detail` (characters) a verdict carries: it is shown to language models."""


class Reason(StrEnum):
    """Why a candidate passed or failed. Values are stable: traces, reports and tools rely on them."""

    OK = "ok"
    # Before running anything.
    SYNTAX_ERROR = "syntax_error"
    FORBIDDEN_CODE = "forbidden_code"
    # Loading.
    COMPILE_ERROR = "compile_error"
    MISSING_MODEL_NEW = "missing_model_new"
    INIT_ERROR = "init_error"
    PARAMETER_MISMATCH = "parameter_mismatch"
    # Running.
    RUNTIME_ERROR = "runtime_error"
    FORBIDDEN_OP = "forbidden_op"
    FORBIDDEN_CALL = "forbidden_call"
    NO_CUSTOM_KERNEL = "no_custom_kernel"
    DECOY_KERNEL = "decoy_kernel"
    TAMPERING = "tampering"
    # Outputs.
    BAD_OUTPUT = "bad_output"
    WRONG_SHAPE = "wrong_shape"
    WRONG_DTYPE = "wrong_dtype"
    WRONG_DEVICE = "wrong_device"
    WRONG_STRIDES = "wrong_strides"
    WRONG_OUTPUT = "wrong_output"
    NAN_OUTPUT = "nan_output"
    STALE_OUTPUT = "stale_output"
    ALIASED_OUTPUT = "aliased_output"
    OUTPUT_CHANGED = "output_changed"
    INPUT_MUTATED = "input_mutated"
    # Faults.
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    OUT_OF_MEMORY = "out_of_memory"
    CUDA_ERROR = "cuda_error"
    # Ours, not the candidate's (`worker_error` is a verdict on the candidate's process; the rest come with
    # verdict "error": the judge could not judge, and the candidate is not to blame).
    WORKER_ERROR = "worker_error"
    PROBLEM_TOO_LARGE = "problem_too_large"
    UNCONFINED = "unconfined"
    """the OS sandbox cannot confine candidate code here and the user did not opt out: nothing was run"""
    BAD_PROBLEM = "bad_problem"
    EVALUATOR_ERROR = "evaluator_error"


class Check(BaseModel):
    """One named check and its outcome, in the order they ran."""

    name: str
    outcome: Literal["pass", "fail", "skip", "info"]
    detail: str = ""


class KernelLaunch(BaseModel):
    """A Triton kernel the candidate launched during its forward passes."""

    name: str
    launches: int
    grids: list[list[int]] = Field(default_factory=list, description="distinct grids seen (at most 4)")
    compiled: dict[str, int] = Field(default_factory=dict,
                                     description="registers, spills, shared_bytes, num_warps, num_stages (GPU only)")
    launches_per_forward: int | None = Field(
        default=None, description="launches in one forward on the problem's own inputs (the base family)")
    arg_bytes_per_forward: int | None = Field(
        default=None, description="bytes the tensor arguments of those launches span, summed over the launches "
                                  "(each launch's distinct tensors counted once): an estimate of the traffic a "
                                  "design of these kernels needs at best, each argument read or written once")


class TrialRecord(BaseModel):
    """One call of the candidate's forward on one input set."""

    family: str
    trial: int
    max_rel_error: float | None = None
    norm_rel_error: float | None = None
    reference_error: float | None = None
    """PyTorch's own error (the problem's precision against the gold) on this trial's inputs, where measured"""
    tolerance: float | None = None
    """the tolerance this trial was judged with"""
    passed: bool = False


class Timing(BaseModel):
    """How fast a verified candidate ran on the GPU, against its baselines (`EvalResult.timing`).

    Device times are medians of event-timed repetitions on flushed caches, over alternating input sets.
    Fields that depend on something unavailable (torch.compile, the roofline) are None, and a
    `*_unavailable` field says why."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    median_ms: float
    """the candidate's median device time per forward"""
    p25_ms: float
    """25th percentile of the repetitions"""
    p75_ms: float
    """75th percentile of the repetitions"""
    min_ms: float
    max_ms: float
    reps: int
    """timed repetitions"""
    wall_median_ms: float
    """median host wall time per repetition (launch overhead shows here)"""
    noise_band: float
    """relative A/A difference between the two eager runs (before and after), floored by their spread"""
    eager_ms: float
    """the reference module run eagerly, mean of its two medians"""
    speedup_vs_eager: float
    """eager_ms / median_ms"""
    vs_eager: Literal["faster", "slower", "no change"]
    """the speedup judged against the noise band"""
    compile_mode: str | None = None
    """the fastest torch.compile mode measured"""
    compile_modes: dict[str, float | str] | None = None
    """every compile mode measured: its median in ms, or why it failed"""
    compile_ms: float | None = None
    """the fastest torch.compile mode's median"""
    speedup_vs_compile: float | None = None
    """compile_ms / median_ms"""
    vs_compile: Literal["faster", "slower", "no change"] | None = None
    """the speedup over torch.compile judged against the noise band"""
    compile_unavailable: str | None = None
    """why there is no compiled baseline"""
    clocks: dict[str, Any] = Field(default_factory=dict)
    """GPU clocks and throttle reasons read before and after the measurement"""
    floor_ms: float | None = None
    """the roofline floor: the least time the problem's flops and bytes can take on this GPU"""
    bound: str | None = None
    """memory or compute: which side of the roofline sets the floor"""
    fraction_of_floor: float | None = None
    """floor_ms / median_ms (1.0 = at the floor)"""
    flops: float | None = None
    """floating-point operations of one forward, counted on the reference"""
    bytes: float | None = None
    """the least bytes one forward must move (inputs, parameters, outputs)"""
    bandwidth: float | None = None
    """bytes/s the roofline's memory side uses: the copy bandwidth measured at `bytes`"""
    compute_floor_ms: float | None = None
    """the roofline's compute side alone (the floor is the larger of it and bytes / bandwidth)"""
    floor_unavailable: str | None = None
    """why there is no roofline floor"""
    best_baseline_ms: float
    """the faster of eager and torch.compile"""
    best_baseline: Literal["eager", "torch.compile"]
    """which baseline was faster"""
    flush_spin_ms: dict[str, float] | None = None
    """medians of the fixed flush+spin, candidate and baseline (a shared GPU shows here)"""
    suspect: list[str] = Field(default_factory=list)
    """reasons not to believe the timing (a suspect result is never admitted by the loop)"""
    timing_sets: int = 1
    """distinct input sets the repetitions alternated over"""
    checked_reps: int = 0
    """timed repetitions whose outputs were checked, each chosen at random after it ran"""
    measure_s: float = 0.0
    """wall seconds this evaluation held the GPU exclusively"""


class EvalResult(BaseModel):
    """The whole verdict on one candidate for one problem, device and precision."""

    verdict: Literal["pass", "fail", "error"]
    """pass or fail: a verdict on the candidate; error: the evaluator could not judge it (`reason` says why)"""
    reason: Reason
    detail: str = ""
    rule: str | None = Field(default=None, description="the static rule that fired, for forbidden_code")
    checks: list[Check] = Field(default_factory=list)
    max_rel_error: float | None = Field(
        default=None,
        description="worst per-element |out-ref| / (|ref| + rms(ref)) over all trials; passes when <= tolerance",
    )
    norm_rel_error: float | None = Field(default=None, description="worst ||out-ref|| / ||ref|| over all trials")
    tolerance: float | None = None
    gold_precision: str | None = Field(
        default=None, description="float64, or native when a float64 reference does not fit (tolerance doubled)")
    memory: dict[str, Any] | None = Field(default=None, description="the memory plan the evaluation ran under")
    precision: str = "fp32"
    device: str = "cpu"
    trials: list[TrialRecord] = Field(default_factory=list)
    families: list[str] = Field(default_factory=list)
    kernels: list[KernelLaunch] = Field(default_factory=list)
    kernel_coverage: float | None = Field(
        default=None, description="share of the forward's time spent in the candidate's own Triton kernels"
    )
    problem_flags: list[str] = Field(default_factory=list, description="e.g. degenerate: a zero output would pass")
    timing: Timing | None = None
    timing_unavailable: str | None = None
    phases: dict[str, float] = Field(default_factory=dict, description="wall seconds per phase")
    candidate_log: str = Field(default="", description="bounded tail of what the candidate printed")
    versions: dict[str, str] = Field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION)", re.I)


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values in the caller's environment that must never appear in a verdict, log or trace."""
    env = os.environ if environ is None else environ
    vals = {v for k, v in env.items() if _SECRET_NAME.search(k) and len(v) >= 6}
    return sorted(vals, key=len, reverse=True)


def redact(text: str, secrets: list[str] | None = None) -> str:
    """Replace every secret value from the environment by a marker."""
    for s in secret_values() if secrets is None else secrets:
        if s in text:
            text = text.replace(s, REDACTED)
    return text


REDACTED = "[redacted]"
_KEY_NAME = re.compile(r"key|token|secret|passw|credential|auth|cookie|session", re.I)
_KEY_SHAPED = re.compile(r"\b(?:sk|hf|ghp|gho|ghs|ghu|gsk|xai|glpat|pplx)[-_](?=[\w-]*\d)[\w-]{20,}"
                         r"|\bAKIA[0-9A-Z]{16}\b|\bAIza[\w-]{35}\b")
"""strings shaped like a provider's API key (a prefix, a separator, 20+ characters with a digit)"""


def config_secrets(config: Any, name: str = "") -> list[str]:
    """Values of a run's configuration that must not leave: strings held under key-like names, and the
    password and query values of any URL in it."""
    from urllib.parse import parse_qsl, urlsplit

    if isinstance(config, dict):
        return [v for k, sub in config.items() for v in config_secrets(sub, str(k))]
    if isinstance(config, list):
        return [v for sub in config for v in config_secrets(sub, name)]
    if not isinstance(config, str) or not config:
        return []
    found = [config] if _KEY_NAME.search(name) and len(config) >= 6 else []
    if "://" in config:
        url = urlsplit(config)
        found += [p for p in (url.password, *(v for _, v in parse_qsl(url.query))) if p and len(p) >= 6]
    return found


def run_secrets(config: Any) -> list[str]:
    """What must not leave a run's files when they are shown or exported: the environment's secret values and
    the secrets of the run's configuration, longest first."""
    return sorted({*secret_values(), *config_secrets(config)}, key=len, reverse=True)


def scrub(text: str, secrets: list[str]) -> str:
    """`text` with every secret value, and every string shaped like an API key, replaced by [redacted]."""
    return _KEY_SHAPED.sub(REDACTED, redact(text, secrets))


def bound(text: str, limit: int = DETAIL_LIMIT) -> str:
    """Redact, then keep the head and the tail of an over-long text."""
    text = redact(text)
    if len(text) <= limit:
        return text
    half = (limit - 40) // 2
    return f"{text[:half]}\n… [{len(text) - 2 * half} characters cut] …\n{text[-half:]}"
