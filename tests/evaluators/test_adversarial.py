"""The adversarial suite: every exploit in tests/adversarial/candidates must fail, for the stated reason.

One candidate file per exploit (KernelBench `test_kernels/` style), covering every class of docs/verifier.md
section A (1-15) and C (24-25), plus the harness and file tampering of B 18-19 that a candidate attempts
from inside its own process. Each file's docstring states the verdict:

    EXPECT: <reason>[|<reason>...] [rule=<static rule>]
    EXPECT_RUNTIME: <reason>[|...]      (optional: the verdict with the static pre-filter switched off)
    EXPECT_CUDA: <reason>[|...] [rule=<static rule>]   (optional: EXPECT where it differs on a GPU)
    EXPECT_RUNTIME_CUDA: <reason>[|...]  (optional: EXPECT_RUNTIME where it differs on a GPU)
    PROBLEM: <file in tests/adversarial/problems>
    LIMITS: key=value ...                (optional Limits for hangs and memory hogs)
    TRIALS: n                            (optional trials per family)
    SECRET: NAME                         (optional: a fake secret set in the environment first)
    CANARY: /path                        (optional: a file the candidate tries to write; must not exist after)

EXPECT_RUNTIME is what proves that the static filter is never the only line: the same file runs again
with `static_check=False` and the run-time guards (or the OS sandbox, or the trusted side) must catch it.
The `honest_*` files are controls on the same problems and must pass.

The suite runs on the device named by KW_TEST_DEVICE (tests/conftest.py; "cpu" by default). On a GPU some
verdicts legitimately differ (the kernel-time coverage is measured by the profiler there, and a @triton.jit
body is compiled rather than run as Python); the *_CUDA lines say how.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kernelwright.evaluators import EvalPolicy, EvalResult, Evaluator, Limits, WorkerPool, load_problem
from kernelwright.evaluators.reference import ReferenceSession
from kernelwright.evaluators.sandbox import confine  # noqa: F401 - imported to fail early if it is missing

ROOT = Path(__file__).resolve().parents[1] / "adversarial"
PROBLEMS = ROOT / "problems"
CANDIDATES = sorted((ROOT / "candidates").glob("*.py"))
TRIALS = 2
FAKE_SECRET = "sk-test-kwADVERSARIAL0123456789abcdefSECRET"


@dataclass(frozen=True)
class Spec:
    path: Path
    problem: str
    expect: tuple[str, ...]
    rule: str | None
    runtime: tuple[str, ...] | None
    expect_cuda: tuple[str, ...] | None = None
    rule_cuda: str | None = None
    runtime_cuda: tuple[str, ...] | None = None
    limits: dict[str, float] = field(default_factory=dict)
    trials: int = TRIALS
    secret: str | None = None
    canary: str | None = None

    @property
    def source(self) -> str:
        return self.path.read_text()

    def expected(self, static: bool, device: str) -> tuple[tuple[str, ...] | None, str | None]:
        """The accepted reasons (and the static rule, if one must fire) for this mode on this device."""
        cuda = device == "cuda"
        if static:
            if cuda and self.expect_cuda:
                return self.expect_cuda, self.rule_cuda
            return self.expect, self.rule
        return (self.runtime_cuda if cuda and self.runtime_cuda else self.runtime), None


def parse(path: Path) -> Spec:
    text = path.read_text()
    doc = text.split('"""')[1]

    def line(key: str) -> str | None:
        m = re.search(rf"^{key}:\s*(.+?)\s*$", doc, re.M)
        return m.group(1) if m else None

    first = doc.splitlines()[0]
    m = re.fullmatch(r"EXPECT:\s*(\S+)(?:\s+rule=(\S+))?\s*", first)
    assert m, f"{path.name}: the docstring's first line must be 'EXPECT: <reason> [rule=<rule>]', not {first!r}"
    cuda = line("EXPECT_CUDA")
    mc = re.fullmatch(r"(\S+)(?:\s+rule=(\S+))?", cuda) if cuda else None
    assert cuda is None or mc, f"{path.name}: EXPECT_CUDA must read '<reason>[|...] [rule=<rule>]', not {cuda!r}"
    runtime_cuda = line("EXPECT_RUNTIME_CUDA")
    runtime = line("EXPECT_RUNTIME")
    problem = line("PROBLEM")
    assert problem and (PROBLEMS / problem).is_file(), f"{path.name}: PROBLEM names no file in {PROBLEMS}"
    limits: dict[str, float] = {}
    for kv in (line("LIMITS") or "").split():
        key, value = kv.split("=")
        limits[key] = int(value) if key == "memory_bytes" else float(value)
    return Spec(path=path, problem=problem, expect=tuple(m.group(1).split("|")), rule=m.group(2),
                runtime=tuple(runtime.split("|")) if runtime else None,
                expect_cuda=tuple(mc.group(1).split("|")) if mc else None, rule_cuda=mc.group(2) if mc else None,
                runtime_cuda=tuple(runtime_cuda.split("|")) if runtime_cuda else None, limits=limits,
                trials=int(line("TRIALS") or TRIALS), secret=line("SECRET"), canary=line("CANARY"))


SPECS = [parse(p) for p in CANDIDATES]
CASES = [pytest.param(s, True, id=f"{s.path.stem}") for s in SPECS] + [
    pytest.param(s, False, id=f"{s.path.stem}-runtime") for s in SPECS if s.runtime
]


def describe(result: EvalResult) -> str:
    checks = "; ".join(f"{c.name}={c.outcome}" for c in result.checks)
    return (f"verdict={result.verdict} reason={result.reason} rule={result.rule}\n  detail: {result.detail}\n"
            f"  checks: {checks}\n  candidate log: {result.candidate_log[-800:]}")


def _sandboxed(result: EvalResult) -> bool:
    return any(c.name == "sandbox" and c.detail.startswith("landlock") for c in result.checks)


def _policy(**kw) -> EvalPolicy:
    # The torch.compile baseline says nothing about a verdict and costs tens of seconds per problem on a
    # GPU (on the CPU nothing is timed at all).
    return EvalPolicy(compile_mode=None, **kw)


@pytest.fixture(scope="module")
def shared_pool(test_device: str) -> Iterator[WorkerPool]:
    # A GPU worker takes ~6-10 s to start (torch, a CUDA context); more spares keep the suite moving.
    with WorkerPool(test_device, Limits(), spares=1 if test_device == "cpu" else 6) as pool:
        yield pool


@pytest.fixture(scope="module")
def evaluators(shared_pool: WorkerPool, test_device: str) -> Iterator[dict]:
    """One Evaluator per (problem, static mode, trials), sharing the pool of pre-started workers."""
    made: dict[tuple[str, bool, int], Evaluator] = {}

    def get(problem: str, static: bool, trials: int) -> Evaluator:
        key = (problem, static, trials)
        if key not in made:
            made[key] = Evaluator(load_problem(PROBLEMS / problem), test_device,
                                  _policy(trials=trials, static_check=static), pool=shared_pool)
        return made[key]

    yield get
    for ev in made.values():
        ev.close()


def _evaluate(spec: Spec, static: bool, evaluators, monkeypatch: pytest.MonkeyPatch,
              device: str) -> tuple[EvalResult, float]:
    if spec.secret:
        # Set before the Evaluator exists, so the worker is spawned from an environment that holds it.
        monkeypatch.setenv(spec.secret, FAKE_SECRET)
    if spec.limits or spec.secret:
        policy = _policy(trials=spec.trials, static_check=static, limits=Limits(**spec.limits), spares=0)
        t0 = time.monotonic()
        with Evaluator(load_problem(PROBLEMS / spec.problem), device, policy) as ev:
            result = ev.evaluate(spec.source)
        return result, time.monotonic() - t0
    ev = evaluators(spec.problem, static, spec.trials)
    t0 = time.monotonic()
    result = ev.evaluate(spec.source)
    return result, time.monotonic() - t0


@pytest.mark.parametrize(("spec", "static"), CASES)
def test_candidate(spec: Spec, static: bool, evaluators, monkeypatch: pytest.MonkeyPatch, test_device: str) -> None:
    if spec.canary and os.path.exists(spec.canary):
        os.remove(spec.canary)
    result, elapsed = _evaluate(spec, static, evaluators, monkeypatch, test_device)
    expected, rule = spec.expected(static, test_device)
    assert expected is not None
    shown = (f"{spec.path.name} ({'static filter on' if static else 'static filter off'}, {test_device})\n"
             f"{describe(result)}")

    if result.verdict == "pass":
        assert "ok" in expected, f"exploit not caught: {shown}"
        return
    if expected == ("ok",):
        pytest.fail(f"an honest control was rejected: {shown}")
    assert result.reason.value in expected, f"expected {'|'.join(expected)}: {shown}"
    if rule:
        assert result.rule == rule, f"expected static rule {rule}: {shown}"

    limits = Limits(**spec.limits)
    if result.reason == "timeout":
        phase = limits.load_s if "load" in result.detail or "import" in result.detail else limits.first_call_s
        # The phase's limit plus the kill: bounded, whatever the candidate does. A fresh worker's start-up
        # and the reference's own set-up are not the candidate's doing (on a GPU they take ~10 s).
        setup = result.phases.get("worker_wait_s", 0.0) + result.phases.get("reference_s", 0.0)
        assert elapsed - setup < phase + 20, (f"the timeout took {elapsed:.1f} s ({setup:.1f} s of it start-up) "
                                              f"for a {phase:.0f} s limit: {shown}")
    if spec.secret:
        dump = result.model_dump_json()
        assert FAKE_SECRET not in dump, f"the secret leaked into the verdict: {shown}"
        assert FAKE_SECRET.encode().hex() not in dump
        assert spec.secret not in result.detail, f"the worker's environment held {spec.secret}: {shown}"
        if not static and "ENVIRONMENT" in spec.source:
            # The candidate did read its environment (and put it in the message): it just was not there.
            assert "ENVIRONMENT" in result.detail and "PATH" in result.detail, shown
    if spec.canary:
        if not static and not _sandboxed(result):
            pytest.skip("no Landlock sandbox on this kernel: file writes are not confined at run time")
        assert not os.path.exists(spec.canary), f"the candidate wrote {spec.canary}: {shown}"


def test_every_exploit_class_is_covered() -> None:
    """docs/verifier.md A 1-15 and C 24-25 each have at least one candidate (file prefix aNN_ / cNN_)."""
    present = {p.name.split("_")[0] for p in CANDIDATES}
    missing = [f"a{n:02d}" for n in range(1, 16) if f"a{n:02d}" not in present]
    missing += [c for c in ("c24", "c25") if c not in present]
    assert not missing, f"no adversarial candidate for classes {missing}"


@pytest.mark.parametrize(("problem", "flag"), [
    ("relu.py", "degenerate: passing input 0 through unchanged would pass"),
    ("softmax_wide.py", None),
    ("scale_bias.py", None),
])
def test_problem_flags(problem: str, flag: str | None, test_device: str) -> None:
    """The verifier tests the problem too: a ReLU on positive inputs is flagged, the wide softmax is not
    (a zero output must fail it under the relative rule, so it is not degenerate)."""
    from kernelwright.evaluators.compare import degenerate_outputs

    ref = ReferenceSession(load_problem(PROBLEMS / problem), __import__("torch").device(test_device), seed=7)
    b = ref.new_battery()
    trials = [ref.trial("base", i, b) for i in range(2)]
    flags = sorted(set.intersection(*(set(degenerate_outputs(t.gold, t.inputs, t.tolerance)) for t in trials)))
    if flag is None:
        assert flags == [], flags
    else:
        assert flag in flags, flags


PROC_SCRIPT = """
import sys
from kernelwright.evaluators import EvalPolicy, Evaluator, Limits, load_problem
with Evaluator(load_problem(sys.argv[1]), sys.argv[3], EvalPolicy(trials=1, static_check=False, spares=0)) as ev:
    print(ev.evaluate(open(sys.argv[2]).read()).model_dump_json())
"""


def test_parent_environment_is_out_of_reach(tmp_path: Path, test_device: str) -> None:
    """Class 25 through /proc: the trusted process's own environment (not just the worker's) holds the
    secret from the start, as for a real `kernelwright` run; the candidate reads /proc/<pid>/environ of
    its parent and of every other process and raises with what it found, hex-encoded."""
    spec = parse(ROOT / "candidates" / "c25_proc_environ.py")
    env = dict(os.environ, **{spec.secret: FAKE_SECRET, "OPENAI_API_KEY": FAKE_SECRET})
    proc = subprocess.run([sys.executable, "-c", PROC_SCRIPT, str(PROBLEMS / spec.problem), str(spec.path),
                           test_device],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = EvalResult.model_validate(json.loads(proc.stdout.strip().splitlines()[-1]))
    shown = describe(result)
    assert "LEAK" in result.detail, f"the candidate did not run as intended: {shown}"
    if not _sandboxed(result):
        pytest.skip("no Landlock sandbox on this kernel: other processes' /proc entries are readable")
    hits = re.search(r"hits=([0-9a-f]*)\.", result.detail)
    assert hits is not None, shown
    assert hits.group(1) == "", f"the candidate read secrets from /proc: {bytes.fromhex(hits.group(1))[:80]!r}"
    assert FAKE_SECRET not in proc.stdout and FAKE_SECRET.encode().hex() not in proc.stdout, shown
