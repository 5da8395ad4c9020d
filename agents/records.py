"""The trace's step record: one line of a run's `trace.jsonl` per step (parent -> proposal -> child ->
verdict -> archive decision), with what each role saw, decided and spent.

Versioned (`schema_version`) and documented field by field in docs/trace.md; `kernelwright trace --json`
prints records that validate against `StepRecord`, and its JSON schema is `StepRecord.model_json_schema()`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelwright.evaluators import Timing

from .archive import Outcome, Step
from .schemas import Diagnosis, Proposal

SCHEMA_VERSION = 1


class RoleUsage(BaseModel):
    """One role's model calls within a step."""

    model_config = ConfigDict(extra="forbid")

    model: str
    """the provider:model spec the role used"""
    calls: int = 0
    retries: int = 0
    """transient provider failures retried"""
    input_tokens: int = 0
    output_tokens: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    """at the run's prices (0 when no price was given)"""
    reasoning: list[str] = Field(default_factory=list)
    """the model's reasoning text, where the provider returns it"""
    transcript: str
    """path of the role's full transcript, relative to the run directory"""
    error: str | None = None
    """one sentence, when the role's model failed (the branch then falls back or ends)"""
    error_kind: Literal["provider", "model"] | None = None
    """provider: the service failed for good (retries spent); model: it kept answering unusably"""


class CoderRecord(BaseModel):
    """What the coder did."""

    model_config = ConfigDict(extra="forbid")

    policy: str | None = None
    """builtin or the model spec"""
    diff: str | None = None
    """unified diff parent -> child"""
    error: str | None = None
    note: str | None = None


class StepResult(BaseModel):
    """The verifier's verdict on the child, in short (the whole result is in evals/<child>.json)."""

    model_config = ConfigDict(extra="forbid")

    verdict: Literal["pass", "fail", "error"]
    reason: str
    detail: str = ""
    max_rel_error: float | None = None
    timing: Timing | None = None
    timing_unavailable: str | None = None
    kernel_coverage: float | None = None


class StepRecord(BaseModel):
    """One step of a run, as written to trace.jsonl."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    step: int
    """position in the run's step list (0-based, in admission order)"""
    step_id: str
    """g<generation>b<branch>: stable across a resume"""
    generation: int
    branch: int
    parent: str
    """the parent kernel's hash (kernels/<hash>.py)"""
    diagnosis: Diagnosis | None = None
    """the analyst's reading of the parent"""
    proposal: Proposal | None = None
    """the strategist's one change (None: nothing left to propose, or its model failed)"""
    coder: CoderRecord = Field(default_factory=CoderRecord)
    child: str | None = None
    """the child kernel's hash (None: no child was made)"""
    llm: dict[str, RoleUsage] = Field(default_factory=dict)
    """per role that used a model"""
    verdict: Literal["pass", "fail", "error"] | None = None
    """the verifier's verdict on the child; error: the evaluator failed, not the child"""
    result: StepResult | None = None
    verify_s: float | None = None
    """wall seconds of the verification"""
    evaluator_failure: bool = False
    outcome: Outcome | None = None
    """what the archive decided on"""
    decision: Step
    """the archive's decision: elite, niche or rejected, and why"""
    tokens: int = 0
    """model tokens of the step, all roles"""
    cost_usd: float = 0.0
    policy: str
    """the run's default model (builtin for none)"""
    role_models: dict[str, str] = Field(default_factory=dict)
    time: str
    """when the step was recorded (local time, ISO 8601)"""

    @classmethod
    def read(cls, data: dict[str, Any]) -> StepRecord:
        return cls.model_validate(data)
