"""`kernelwright export`: the step tuples of finished (or running) runs as JSON lines, for training data.

Three formats, each a versioned pydantic model (its name and version in every record's `format`; the JSON
schemas are `kernelwright export --schema --format F`; docs/export.md is generated from these models):

- `steps` (`StepExport`): parent and child kernels with their sources and measurements, the change
  (proposal and diff), the diagnosis, what each role saw, and the step's outcome;
- `sft` (`SftExport`): chat messages (system; user with the problem, the parent and the evidence; assistant
  with the proposal and the change), with the step's metadata and outcome;
- `rl` (`RlExport`): a prompt, the reference problem, the parent, the child made, and reward fields.

Definitions (see `StepOutcome` and `dropped_by`): gain = parent median / child median - 1, from the two
kernels' evaluations (None when either is untimed); the noise band is the larger of the two evaluations'
A/A noise bands; the high-gain filter keeps a step only when the child passed, both are timed, no timing is
suspect, the gain exceeds the noise band, and the gain is at least the asked minimum.

Every string of every record is scrubbed before it leaves: the secret values of the environment
(`evaluators.result.secret_values`), values of the run's configuration held under key-like names (and the
password or query of its base URL), and strings shaped like a provider's API key all become `[redacted]`.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Union, cast, get_args

from pydantic import BaseModel, ConfigDict, Field

from kernelwright.agents.records import StepRecord, fields_markdown
from kernelwright.agents.schemas import Diagnosis, Proposal
from kernelwright.agents.tuning import TuneRecord
from kernelwright.api import UsageError, open_run, read_steps
from kernelwright.evaluators import DeviceFacts, EvalResult
from kernelwright.evaluators.facts import cpu_facts
from kernelwright.evaluators.profiling import render
from kernelwright.evaluators.result import bound, run_secrets, scrub
from kernelwright.tools.evaluation import Evaluations
from kernelwright.tools.runstore import Run, RunError

Format = Literal["steps", "sft", "rl"]
Role = Literal["analyst", "strategist", "coder"]
"""the roles that may use a model (agents.llm.ROLES), in the order they act"""
FORMATS: tuple[str, ...] = get_args(Format)
STEPS_FORMAT = "kernelwright.export.steps/1"
SFT_FORMAT = "kernelwright.export.sft/1"
RL_FORMAT = "kernelwright.export.rl/1"

PROMPT_CHARS = 40_000
"""the most of a role's prompt a record carries (head and tail kept; `seen_chars` has the full length)"""
REASONING_CHARS = 8_000
"""the most of one piece of a model's reasoning text a record carries"""

SFT_SYSTEM = (
    "You optimize Triton GPU kernels. You are given a PyTorch reference problem, a working Triton kernel that "
    "solves it (the parent), what was measured about the parent and a diagnosis of what limits it. Propose "
    "exactly one targeted change that makes the kernel faster while keeping its outputs correct, and apply it: "
    "answer with the proposal (kind, what, why, predicted speedup, risk), then the change as a unified diff of "
    "the parent.")
"""the system message of `sft` records and of `rl` prompts"""

# -- the records --------------------------------------------------------------------------------------------


class Measurement(BaseModel):
    """A kernel's GPU timing, as exported (the evaluation's `Timing`, less its clocks and per-mode details)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    median_ms: float
    """median device time per forward"""
    p25_ms: float
    """25th percentile of the repetitions"""
    p75_ms: float
    """75th percentile of the repetitions"""
    reps: int
    """timed repetitions"""
    noise_band: float
    """the evaluation's relative A/A noise band: a difference inside it is no difference"""
    eager_ms: float
    """the reference run eagerly by PyTorch"""
    speedup_vs_eager: float
    """eager_ms / median_ms"""
    compile_ms: float | None = None
    """the fastest torch.compile mode of the reference (None: unavailable)"""
    speedup_vs_compile: float | None = None
    """compile_ms / median_ms"""
    floor_ms: float | None = None
    """the roofline floor on this GPU (None: unavailable)"""
    fraction_of_floor: float | None = None
    """floor_ms / median_ms (1.0 = at the floor)"""
    suspect: list[str] = Field(default_factory=list)
    """reasons not to believe this timing"""


class KernelState(BaseModel):
    """One kernel of the step (parent or child): its source and what its evaluation in the run said."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    hash: str
    """the kernel's hash in the run (kernels/<hash>.py)"""
    source: str
    """the kernel's source"""
    verdict: Literal["pass", "fail", "error"] | None = None
    """its evaluation's verdict (None: never evaluated in this run)"""
    reason: str | None = None
    """its evaluation's reason code (ok, wrong_output, ...)"""
    timing: Measurement | None = None
    """its GPU timing (None: not timed)"""
    timing_unavailable: str | None = None
    """why there is no timing"""
    profile: str | None = None
    """the parent only: the summary of its verdict, timing, launched kernels and profile that the roles are shown"""


class RoleEvidence(BaseModel):
    """What one role was shown before it acted in the step."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    role: Role
    """the role"""
    policy: str
    """builtin, or the provider:model spec the role used"""
    source: Literal["transcript", "record", "missing"]
    """transcript: `seen` is the first user message of the role's transcript (a model role); record: `seen` is
    rebuilt from the step record (a builtin role: the parent's verdict, timing and profile summary, the
    diagnosis, and for the coder the proposal); missing: the model role's transcript could not be read"""
    seen: str
    """what the role was shown (bounded to PROMPT_CHARS, head and tail kept)"""
    seen_chars: int
    """the full length of what the role was shown"""
    reasoning: list[str] = Field(default_factory=list)
    """the model's reasoning text, where the provider returned it (each piece bounded)"""
    error: str | None = None
    """why the role's model failed, when it did"""


class StepOutcome(BaseModel):
    """What the step achieved, measured: the reward fields of `rl`, the outcome of every format."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    verdict: Literal["pass", "fail", "error"] | None
    """the verifier's verdict on the child (error: the evaluator failed, not the child; None: no child was made)"""
    reason: str
    """the verifier's reason code, or no_child"""
    detail: str = ""
    """the verifier's detail, or why no child was made"""
    gain: float | None = None
    """parent median / child median - 1 (0.05: the child is 5 % faster); None: either kernel is untimed"""
    noise_band: float | None = None
    """the larger of the parent's and the child's A/A noise bands (None: neither is timed)"""
    parent_ms: float | None = None
    """the parent's median device time"""
    child_ms: float | None = None
    """the child's median device time"""
    speedup_vs_eager: float | None = None
    """the child's speedup over PyTorch eager"""
    speedup_vs_compile: float | None = None
    """the child's speedup over torch.compile"""
    fraction_of_floor: float | None = None
    """the child's fraction of the roofline floor"""
    suspect: list[str] = Field(default_factory=list)
    """the child's suspect timing flags, and the parent's prefixed 'parent: ' (a suspect gain is not believed)"""
    improved: bool = False
    """the step passes the high-gain filter at --min-gain 0: verified, timed, not suspect, gain beyond the noise band"""
    decision: Literal["elite", "niche", "unmeasured", "rejected"]
    """what the run's archive decided"""


class StepExport(BaseModel):
    """One step of a run: parent -> change -> child, with what each role saw and what was measured."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    format: Literal["kernelwright.export.steps/1"] = "kernelwright.export.steps/1"
    """this record's format and its version"""
    run: str
    """the run's id"""
    problem: str
    """the problem file's name"""
    problem_source: str
    """the reference problem's source (Model, get_inputs, get_init_inputs)"""
    device: str | None = None
    """the device the kernels were judged on (cpu, or the GPU's name and cuda:N)"""
    step: int
    """position in the run's step list"""
    step_id: str
    """g<generation>b<branch>"""
    generation: int
    """the generation the step belongs to (1 = the first after the seed)"""
    branch: int
    """the branch within its generation"""
    parent: KernelState
    """the kernel the step started from"""
    child: KernelState | None = None
    """the kernel the step made (None: no child was made; `outcome.detail` says why)"""
    diagnosis: Diagnosis | None = None
    """the analyst's reading of the parent"""
    proposal: Proposal | None = None
    """the one change the coder was given (None: nothing was proposed)"""
    reviewed: str | None = None
    """a person's decision on the proposal (approve, edit, reject, respond); None: not reviewed"""
    diff: str | None = None
    """unified diff parent -> child (after a tuning sweep chose a variant: parent -> the tuned child)"""
    tuning: TuneRecord | None = None
    """the builtin's sweep of a structural child's knobs before the archive judged it: the untuned child
    (`from`), the variants tried, the one chosen, which is then `child` (None: the change was not structural, or
    its child did not pass)"""
    models: dict[str, str] = Field(default_factory=dict)
    """per role, builtin or the model spec it used"""
    evidence: list[RoleEvidence] = Field(default_factory=list)
    """what each role was shown, in the order the roles acted"""
    outcome: StepOutcome
    """what the step achieved: verdict, gain, noise band, suspect flags, the archive's decision"""


class ChatMessage(BaseModel):
    """One message of a chat."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    role: Literal["system", "user", "assistant"]
    """who speaks"""
    content: str
    """the message's text (Markdown: sources and diffs in fenced code blocks)"""


class StepMeta(BaseModel):
    """Where an `sft` or `rl` record came from."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    run: str
    """the run's id"""
    problem: str
    """the problem file's name"""
    device: str | None = None
    """the device the kernels were judged on"""
    step: int
    """position in the run's step list"""
    step_id: str
    """g<generation>b<branch>"""
    parent: str
    """the parent kernel's hash"""
    child: str | None = None
    """the child kernel's hash (None: no child was made)"""
    category: str | None = None
    """the proposal's kind of change"""
    proposal_key: str | None = None
    """the proposal's stable key"""
    models: dict[str, str] = Field(default_factory=dict)
    """per role, builtin or the model spec it used"""


class SftExport(BaseModel):
    """One step as a supervised fine-tuning example in chat format."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    format: Literal["kernelwright.export.sft/1"] = "kernelwright.export.sft/1"
    """this record's format and its version"""
    messages: list[ChatMessage]
    """system (the task), user (the problem, the parent kernel, its measurements, the diagnosis), assistant (the
    proposal and the change as a diff, or the child's source when there is no diff)"""
    metadata: StepMeta
    """where the example came from"""
    outcome: StepOutcome
    """what the change achieved"""


class RlExport(BaseModel):
    """One step as a reinforcement-learning task: the prompt, what it is about, and the measured reward fields."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    format: Literal["kernelwright.export.rl/1"] = "kernelwright.export.rl/1"
    """this record's format and its version"""
    prompt: list[ChatMessage]
    """system and user messages, as in `sft`"""
    problem: str
    """the reference problem's source (what a candidate is verified against)"""
    parent: str
    """the parent kernel's source"""
    child: str | None = None
    """the kernel the run made from this prompt (None: none was made)"""
    reward: StepOutcome
    """the verdict, gain, noise band, speedups and suspect flags of the run's answer"""
    metadata: StepMeta
    """where the task came from"""


ExportRecord = Union[StepExport, SftExport, RlExport]
MODELS: dict[str, type[BaseModel]] = {"steps": StepExport, "sft": SftExport, "rl": RlExport}


# -- the filter -----------------------------------------------------------------------------------------------


def dropped_by(outcome: StepOutcome, min_gain: float) -> str | None:
    """Why the high-gain filter drops a step (None: it keeps it). Kept: the child passed, both kernels are
    timed, no timing is suspect, gain > noise band and gain >= min_gain."""
    if outcome.verdict != "pass":
        return f"verdict {outcome.verdict or 'none (no child)'}"
    if outcome.gain is None:
        return "not timed"
    if outcome.suspect:
        return f"suspect timing ({outcome.suspect[0]})"
    if outcome.gain <= (outcome.noise_band or 0.0):
        return "gain within the noise band"
    if outcome.gain < min_gain:
        return "gain below the minimum"
    return None


def parse_min_gain(text: str) -> float:
    """--min-gain's value: a fraction >= 0 (0.05 = 5 % faster); UsageError otherwise."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"--min-gain takes a fraction of at least 0 (0.05 = 5 % faster), not {text!r}")
    return value


def parse_format(text: str) -> Format:
    if text not in FORMATS:
        raise UsageError(f"--format takes one of {', '.join(FORMATS)}, not {text!r}")
    return cast(Format, text)


# -- reading runs -------------------------------------------------------------------------------------------


def open_runs(run_ids: Sequence[str], runs_dir: str | Path = "runs") -> list[tuple[Run, list[StepRecord]]]:
    """Each run with its step records, read before anything is written; UsageError (one sentence) for an
    unknown run or a trace this version cannot read."""
    opened = []
    for run_id in dict.fromkeys(run_ids):
        run = open_run(run_id, runs_dir).run
        try:
            run.info()
            records = read_steps(run)
        except RunError as e:
            raise UsageError(str(e)) from None
        except OSError as e:
            raise UsageError(f"run {run_id}: its trace cannot be read ({e.strerror or e})") from None
        opened.append((run, records))
    return opened


def export_records(runs: Iterable[tuple[Run, list[StepRecord]]], fmt: Format = "steps",
                   min_gain: float | None = None) -> Iterator[ExportRecord]:
    """The records of every step of `runs` (from `open_runs`) in format `fmt`, scrubbed of secrets; with
    `min_gain`, only the steps the high-gain filter keeps (`dropped_by`)."""
    for run, records in runs:
        for rec in step_exports(run, records):
            if min_gain is not None and dropped_by(rec.outcome, min_gain) is not None:
                continue
            yield rec if fmt == "steps" else to_sft(rec) if fmt == "sft" else to_rl(rec)


def step_exports(run: Run, records: Sequence[StepRecord]) -> Iterator[StepExport]:
    """The run's steps as `StepExport` records, every string scrubbed of secrets (see the module's doc);
    UsageError (one sentence) when a kernel, an evaluation or the problem of the run cannot be read."""
    where = f"run {run.id}"
    try:
        reader = _RunReader(run)
        for s in records:
            where = f"run {run.id}, step {s.step_id}"
            rec = reader.step(s)
            yield StepExport.model_validate(_scrub(rec.model_dump(mode="json"), reader.secrets))
    except RunError as e:
        raise UsageError(str(e)) from None
    except ValueError as e:  # pydantic: an evaluation this version cannot read
        raise UsageError(f"{where} cannot be read ({str(e).splitlines()[0]})") from None
    except OSError as e:
        raise UsageError(f"{where} cannot be read ({e.strerror or e}: {e.filename})") from None


class _RunReader:
    """One run's kernels, evaluations and profile summaries, each read once."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.info = run.info()
        self.secrets = run_secrets(self.info.config.model_dump(mode="json"))
        self.problem_source = run.problem_source()
        self.kernels: dict[str, KernelState] = {}
        self.profiles: dict[str, str] = {}
        self.device: str | None = None

    def step(self, s: StepRecord) -> StepExport:
        parent = self.kernel(s.parent).model_copy(update={"profile": self.profile(s.parent)})
        child = self.kernel(s.child) if s.child else None
        models = {role: s.llm[role].model if role in s.llm else s.role_models.get(role, s.policy)
                  for role in get_args(Role)}
        if s.coder.policy and "coder" not in s.llm:
            models["coder"] = s.coder.policy
        return StepExport(
            run=self.run.id, problem=Path(self.info.problem).name, problem_source=self.problem_source,
            device=self.device, step=s.step, step_id=s.step_id, generation=s.generation, branch=s.branch,
            parent=parent, child=child, diagnosis=s.diagnosis, proposal=s.proposal,
            reviewed=s.review.decision if s.review else None, diff=self.diff(s, parent, child), tuning=s.tuning,
            models=models,
            evidence=[e for role in get_args(Role) if (e := self.role_evidence(s, role, models[role])) is not None],
            outcome=outcome(s, parent, child))

    def diff(self, s: StepRecord, parent: KernelState, child: KernelState | None) -> str | None:
        """The coder's diff, or, when a tuning sweep chose a variant, the diff parent -> tuned child: the change the
        step's measured gain belongs to."""
        if not (s.tuning and s.tuning.chose and child):
            return s.coder.diff
        return "".join(difflib.unified_diff(parent.source.splitlines(keepends=True),
                                            child.source.splitlines(keepends=True), f"{parent.hash}.py", "child.py"))

    def kernel(self, h: str) -> KernelState:
        if h not in self.kernels:
            data = self.run.eval(h)
            result = EvalResult.model_validate(data) if data is not None else None
            t = result.timing if result else None
            if result is not None and self.device is None:
                self.device = self.device_name(result.device)
            self.kernels[h] = KernelState(
                hash=h, source=self.run.kernel(h), verdict=result.verdict if result else None,
                reason=str(result.reason) if result else None,
                timing=Measurement(**{k: getattr(t, k) for k in Measurement.model_fields}) if t else None,
                timing_unavailable=(result.timing_unavailable if result else "never evaluated in this run")
                if t is None else None)
        return self.kernels[h]

    def device_name(self, device: str) -> str:
        if device == "cpu":
            return cpu_facts().name
        try:
            facts = DeviceFacts.model_validate_json((self.run.path / "devices" / f"{device.replace(':', '_')}.json")
                                                    .read_text())
            return f"{facts.name} ({device})"
        except (OSError, ValueError):
            return device

    def profile(self, h: str) -> str:
        if h not in self.profiles:
            self.profiles[h] = render(Evaluations(self.run).evidence(h))
        return self.profiles[h]

    def role_evidence(self, s: StepRecord, role: Role, policy: str) -> RoleEvidence | None:
        usage = s.llm.get(role)
        if usage is None:
            if policy != "builtin":
                return None  # a model role that made no call in this step (the step ended before it)
            parts = [f"the parent kernel ({s.parent}):\n{self.profile(s.parent)}"]
            if role != "analyst" and s.diagnosis:
                parts.append(diagnosis_text(s.diagnosis))
            if role == "coder" and s.proposal:
                parts.append(proposal_text(s.proposal))
            seen = "\n\n".join(parts)
            return RoleEvidence(role=role, policy=policy, source="record", seen=seen, seen_chars=len(seen))
        prompt = self.run.transcript_prompt(usage.transcript)
        return RoleEvidence(role=role, policy=usage.model, source="transcript" if prompt is not None else "missing",
                            seen=bound(prompt or "", PROMPT_CHARS), seen_chars=len(prompt or ""),
                            reasoning=[bound(r, REASONING_CHARS) for r in usage.reasoning], error=usage.error)


def outcome(s: StepRecord, parent: KernelState, child: KernelState | None) -> StepOutcome:
    """The step's outcome from its record and the two kernels' evaluations."""
    pt, ct = parent.timing, child.timing if child else None
    gain = pt.median_ms / ct.median_ms - 1 if pt and ct and ct.median_ms > 0 else None
    bands = [t.noise_band for t in (pt, ct) if t is not None]
    suspect = (list(ct.suspect) if ct else []) + [f"parent: {f}" for f in (pt.suspect if pt else [])]
    if s.child is None:
        reason, detail = "no_child", s.coder.error or s.coder.note or (
            "nothing was proposed" if s.proposal is None else "the coder made no kernel")
    else:
        reason = s.result.reason if s.result else (child.reason if child and child.reason else "unknown")
        detail = s.result.detail if s.result else ""
    out = StepOutcome(verdict=s.verdict if s.child else None, reason=reason, detail=detail, gain=gain,
                      noise_band=max(bands) if bands else None, parent_ms=pt.median_ms if pt else None,
                      child_ms=ct.median_ms if ct else None, speedup_vs_eager=ct.speedup_vs_eager if ct else None,
                      speedup_vs_compile=ct.speedup_vs_compile if ct else None,
                      fraction_of_floor=ct.fraction_of_floor if ct else None, suspect=suspect,
                      decision=s.decision.decision)
    out.improved = dropped_by(out, 0.0) is None
    return out


# -- the chat formats -----------------------------------------------------------------------------------------


def diagnosis_text(d: Diagnosis) -> str:
    text = f"diagnosis: {d.bottleneck}-bound: {d.summary}"
    if d.evidence:
        text += "\nevidence: " + "; ".join(d.evidence)
    if d.headroom is not None:
        text += f"\nheadroom above the roofline floor: {d.headroom:.0%}"
    return text


def proposal_text(p: Proposal) -> str:
    return (f"proposal ({p.category}, risk {p.risk}): {p.what}\nwhy: {p.why}\n"
            f"predicted speedup: {p.predicted_speedup:g}x")


def fenced(lang: str, text: str) -> str:
    """A Markdown code block holding `text` exactly (a diff's trailing context lines are significant)."""
    fence = "`" * (max((len(run) for run in re.findall(r"`{3,}", text)), default=2) + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{fence}{lang}\n{body}{fence}"


def user_message(rec: StepExport) -> str:
    """The problem, the parent kernel, its measurements (the profile summary the analyst saw) and the diagnosis."""
    parts = [f"## Problem (PyTorch reference, {rec.problem})\n{fenced('python', rec.problem_source)}",
             f"## Parent kernel\n{fenced('python', rec.parent.source)}"]
    if rec.device:
        parts.append(f"## Device\n{rec.device}")
    parts.append(f"## What was measured\n{rec.parent.profile or 'nothing'}")
    if rec.diagnosis:
        parts.append(f"## Diagnosis\n{diagnosis_text(rec.diagnosis)}")
    return "\n\n".join(parts)


def assistant_message(rec: StepExport) -> str:
    parts = [proposal_text(rec.proposal)] if rec.proposal else []
    if rec.diff:
        parts.append(fenced("diff", rec.diff))
    elif rec.child:
        parts.append(fenced("python", rec.child.source))
    else:
        parts.append(f"(no kernel was made: {rec.outcome.detail})")
    return "\n\n".join(parts)


def meta(rec: StepExport) -> StepMeta:
    return StepMeta(run=rec.run, problem=rec.problem, device=rec.device, step=rec.step, step_id=rec.step_id,
                    parent=rec.parent.hash, child=rec.child.hash if rec.child else None,
                    category=rec.proposal.category if rec.proposal else None,
                    proposal_key=rec.proposal.key if rec.proposal else None, models=rec.models)


def to_sft(rec: StepExport) -> SftExport:
    return SftExport(messages=[ChatMessage(role="system", content=SFT_SYSTEM),
                               ChatMessage(role="user", content=user_message(rec)),
                               ChatMessage(role="assistant", content=assistant_message(rec))],
                     metadata=meta(rec), outcome=rec.outcome)


def to_rl(rec: StepExport) -> RlExport:
    return RlExport(prompt=[ChatMessage(role="system", content=SFT_SYSTEM),
                            ChatMessage(role="user", content=user_message(rec))],
                    problem=rec.problem_source, parent=rec.parent.source,
                    child=rec.child.source if rec.child else None, reward=rec.outcome, metadata=meta(rec))


# -- secrets --------------------------------------------------------------------------------------------------


def _scrub(data: Any, secrets: list[str]) -> Any:
    if isinstance(data, str):
        return scrub(data, secrets)
    if isinstance(data, dict):
        return {scrub(k, secrets): _scrub(v, secrets) for k, v in data.items()}
    if isinstance(data, list):
        return [_scrub(v, secrets) for v in data]
    return data


# -- writing ------------------------------------------------------------------------------------------------


def write_jsonl(records: Iterable[BaseModel], path: Path) -> int:
    """Write one record per line to `path` atomically (nothing is left there on failure); returns the count.
    OSError when the file cannot be written."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    n = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for rec in records:
                f.write(rec.model_dump_json() + "\n")
                n += 1
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return n


def json_schema(fmt: Format) -> dict[str, Any]:
    return MODELS[fmt].model_json_schema()


# -- docs/export.md -------------------------------------------------------------------------------------------


def schema_markdown() -> str:
    """docs/export.md: the three formats, field by field (from the models' own field docs)."""
    out = ["# Exported steps (`kernelwright export`)", "",
           "`kernelwright export RUN_ID... --format steps|sft|rl [--min-gain X] [--out FILE.jsonl]` writes one JSON",
           "object per line, one per step of each run, in run order. Every record names its format and version in",
           f"`format` ({STEPS_FORMAT}, {SFT_FORMAT}, {RL_FORMAT}); the JSON schemas are",
           "`kernelwright export --schema --format F`. This file is generated from `kernelwright.export` (a test",
           "keeps it in step).", "",
           "- **gain** = parent median / child median - 1, both from the kernels' evaluations in the run",
           "  (`evals/<hash>.json`); None when either kernel is untimed (CPU runs are never timed).",
           "- **noise band** = the larger of the two evaluations' A/A noise bands.",
           "- **`--min-gain X`** keeps a step only when the child's verdict is pass, both kernels are timed, neither",
           "  timing is suspect, gain > noise band, and gain >= X (a fraction: 0.05 = 5 % faster). `improved` is",
           "  this filter at X = 0. Without `--min-gain` every step is exported, failures and steps without a child",
           "  included (`outcome.verdict` null, `outcome.reason` no_child).",
           "- **evidence**: for a model role, the first user message of its transcript (bounded to",
           f"  {PROMPT_CHARS:,} characters, head and tail kept) and its reasoning text; for a builtin role, the",
           "  parent's verdict, timing and profile summary, the diagnosis and (coder) the proposal.",
           "- **secrets**: every string is scrubbed before it is written: the environment's secret values, values",
           "  of the run's configuration under key-like names (and a URL's password or query values), and strings",
           "  shaped like a provider's API key become `[redacted]`.", "",
           "The system message of `sft` records and `rl` prompts:", "", f"> {SFT_SYSTEM}", ""]
    return "\n".join(out + fields_markdown([StepExport, SftExport, RlExport]))
