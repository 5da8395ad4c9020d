"""The trace's step record: one line of a run's `trace.jsonl` per step (parent -> proposal -> child ->
verdict -> archive decision), with what each role saw, decided and spent.

Versioned (`schema_version`) and documented field by field in docs/trace.md; `kernelwright trace --json`
prints records that validate against `StepRecord`, and its JSON schema is `StepRecord.model_json_schema()`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelwright.evaluators import Timing
from kernelwright.tools.runstore import ModelUsage

from .archive import Outcome, Step
from .proposal_review import ReviewRecord
from .schemas import Diagnosis, Proposal
from .tuning import TuneRecord

SCHEMA_VERSION = 4
"""2: `decision` gained "unmeasured" and the predicted and measured speedups; `proposal.category` structural kinds;
3: `review` (a person's decision on the proposal) and `steering` (what the reviewer's steering put in force);
4: `tuning` (the builtin's sweep of a structural child's knobs before the archive judged it) and `confirmation`
(a child faster than its parent judged a second time with fresh draws)"""


class Confirmation(BaseModel):
    """A second judgement of a child that ran faster than its parent, with input draws and parameters the first
    never saw, before the archive may call it better: a kernel that fails one draw in tens (a numerically fragile
    reduction) is caught here rather than by chance in a later step."""

    model_config = ConfigDict(extra="forbid")

    verdict: Literal["pass", "fail", "error"]
    reason: str
    detail: str = ""
    max_rel_error: float | None = None


class CoderRecord(BaseModel):
    """What the coder did."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    policy: str | None = None
    """builtin or the model spec"""
    diff: str | None = None
    """unified diff parent -> child"""
    error: str | None = None
    """why no child was made, in one sentence"""
    note: str | None = None
    """why the coder had nothing to do"""


class StepResult(BaseModel):
    """The verifier's verdict on the child, in short (the whole result is in evals/<child>.json)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    verdict: Literal["pass", "fail", "error"]
    reason: str
    """the machine-readable reason code (ok, wrong_output, timeout, ...)"""
    detail: str = ""
    """one bounded sentence or paragraph"""
    max_rel_error: float | None = None
    """worst error relative to |ref| + rms(ref) over the trials"""
    timing: Timing | None = None
    """the GPU timing summary (None on the CPU or when rejected)"""
    timing_unavailable: str | None = None
    """why there is no timing"""
    kernel_coverage: float | None = None
    """share of the forward's time spent in the candidate's own kernels"""


class SteeringRecord(BaseModel):
    """The reviewer's steering in force when a step began (the full log is the run's steering.jsonl)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    notes: list[str] = Field(default_factory=list)
    """standing notes the strategist was shown"""
    pinned: str | None = None
    """the kernel every branch started from"""
    banned: list[str] = Field(default_factory=list)
    """kinds of move (proposal categories or key prefixes) the strategist could not propose"""


class StepRecord(BaseModel):
    """One step of a run, as written to trace.jsonl."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    schema_version: int = SCHEMA_VERSION
    """the version of this schema the record was written with"""
    step: int
    """position in the run's step list (0-based, in admission order)"""
    step_id: str
    """g<generation>b<branch>: stable across a resume"""
    generation: int
    """the generation the step belongs to (1 = the first after the seed)"""
    branch: int
    """the branch within its generation"""
    parent: str
    """the parent kernel's hash (kernels/<hash>.py)"""
    diagnosis: Diagnosis | None = None
    """the analyst's reading of the parent"""
    proposal: Proposal | None = None
    """the strategist's one change (None: nothing left to propose, or its model failed); after a review, the
    proposal the coder was given (the strategist's is then in `review.original_proposal`)"""
    review: ReviewRecord | None = None
    """a person's decision on the proposal (runs with `review: proposals`): who, what, when, why"""
    steering: SteeringRecord | None = None
    """the reviewer's steering in force when the step began (None: none)"""
    coder: CoderRecord = Field(default_factory=CoderRecord)
    """what the coder did"""
    child: str | None = None
    """the child kernel's hash (None: no child was made)"""
    llm: dict[str, ModelUsage] = Field(default_factory=dict)
    """per role that used a model"""
    verdict: Literal["pass", "fail", "error"] | None = None
    """the verifier's verdict on the child; error: the evaluator failed, not the child"""
    result: StepResult | None = None
    """the verifier's verdict in short (None: no child was made)"""
    verify_s: float | None = None
    """wall seconds of the verification"""
    tuning: TuneRecord | None = None
    """a structural child's knobs swept by the builtin before the archive judged the step: the untuned child
    (`from`), the variants tried, the one chosen, which is then `child` (None: the change was not structural, or
    its child did not pass)"""
    confirmation: Confirmation | None = None
    """the second judgement of a child faster than its parent, with fresh draws (None: not asked: the child was not
    timed, failed, or was not faster); a failure there is the step's verdict"""
    evaluator_failure: bool = False
    """the evaluator could not judge the child (verdict error): not held against the change"""
    outcome: Outcome | None = None
    """what the archive decided on"""
    decision: Step
    """the archive's decision (elite, niche, unmeasured or rejected), why, and the predicted and measured speedups"""
    tokens: int = 0
    """model tokens of the step, all roles"""
    cost_usd: float = 0.0
    """model cost of the step in USD, at the run's prices"""
    policy: str
    """the run's default model (builtin for none)"""
    role_models: dict[str, str] = Field(default_factory=dict)
    """per-role models overriding `policy`"""
    time: str
    """when the step was recorded (local time, ISO 8601)"""



def schema_markdown() -> str:
    """docs/trace.md: the step record, field by field (from the models' own field docs)."""
    out = ["# The step record (`trace.jsonl`)", "",
           "One JSON object per line of `runs/<id>/trace.jsonl`, one per step, as `kernelwright trace --json` prints",
           f"them. Schema version {SCHEMA_VERSION}; the JSON schema is `kernelwright trace --schema`. This file is",
           "generated from `kernelwright.agents.records` (a test keeps it in step).", ""]
    return "\n".join(out + fields_markdown([StepRecord]))


def fields_markdown(roots: list[type[BaseModel]]) -> list[str]:
    """One table per model reachable from `roots` (their fields' types, recursively): field, type, meaning."""
    out: list[str] = []
    seen: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = list(roots)
    while todo:
        model = todo.pop(0)
        if model in seen:
            continue
        seen.append(model)
        out += [f"## {model.__name__}", "", (model.__doc__ or "").strip().splitlines()[0], "",
                "| field | type | meaning |", "| --- | --- | --- |"]
        for name, f in model.model_fields.items():
            todo += [m for m in _models_in(f.annotation) if m not in seen and m not in todo]
            desc = (f.description or "").replace("\n", " ").replace("|", "\\|")
            out.append(f"| `{f.alias or name}` | `{_type_name(f.annotation)}` | {desc} |")
        out.append("")
    return out


def _type_name(ann: Any) -> str:
    from typing import Literal, Union, get_args, get_origin

    origin, args = get_origin(ann), get_args(ann)
    if origin is Literal:
        return " \\| ".join(repr(a) for a in args)
    if origin is Union or type(ann).__name__ == "UnionType":
        return " \\| ".join(_type_name(a) for a in args)
    if origin in (list, dict, tuple):
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in args)}]"
    if ann is type(None):
        return "null"
    return getattr(ann, "__name__", str(ann))


def _models_in(ann: Any) -> list[type[BaseModel]]:
    from typing import get_args

    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [m for a in get_args(ann) for m in _models_in(a)]
