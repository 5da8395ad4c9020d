"""An error raised inside Triton's interpreter names the candidate's own line where it happened, however deep: the
interpreter raises it again at the launch and again at each call of a @triton.jit helper, each time as
`InterpreterError(repr(error))` with the inner frames left on its cause. A GroupNorm run's model was shown a numpy
error ("only 0-dimensional arrays can be converted to Python scalars") with no line of its kernel, in the ordering
check (BENCHMARKS.md, "Two memory-bound problems with ticket waits allowed, on an H200"). Both ways a candidate runs
in the interpreter are checked: the CPU mode's ordinary evaluation and the ordering check of a kernel with ticket
waits. tests/evaluators/test_error_lines.py holds the case of an error in the kernel itself."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kernelwright.evaluators import EvalPolicy, Evaluator, load_problem
from kernelwright.evaluators.worker import _describe

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "evaluators" / "data"
PROBLEMS = ROOT / "adversarial" / "problems"

pytestmark = pytest.mark.timeout(240)


def _line(source: str, marker: str) -> tuple[int, str]:
    """The number and text of the one line of `source` holding `marker`."""
    found = [(i, line.strip()) for i, line in enumerate(source.splitlines(), 1) if marker in line]
    assert len(found) == 1, found
    return found[0]


def _assert_names_the_helper(detail: str, source: str) -> None:
    number, text = _line(source, "# FAILS HERE")
    caller, _ = _line(source, "# CALLS THE HELPER")
    assert f"candidate line {number}, in _" in detail and text in detail, detail  # the helper's failing statement
    assert f"candidate line {caller}," in detail, detail  # and the kernel's line that called it
    # the interpreter's wrapper unwrapped once: the error's own type and message, not a repr of a repr
    assert "InterpreterError: TypeError: " in detail and 'InterpreterError("' not in detail, detail


def test_a_numpy_error_in_a_kernels_helper_names_the_helpers_line() -> None:
    source = (DATA / "interp_error_helper.py").read_text()
    with Evaluator(load_problem(PROBLEMS / "add.py"), "cpu", EvalPolicy(compile_mode=None, trials=1, spares=0)) as ev:
        result = ev.evaluate(source, quick=True)
    assert (result.verdict, result.reason.value) == ("fail", "runtime_error"), (result.reason, result.detail)
    _assert_names_the_helper(result.detail, source)


def test_the_ordering_check_names_the_line_the_interpreter_refused() -> None:
    source = (DATA / "interp_error_ticket_helper.py").read_text()
    with Evaluator(load_problem(PROBLEMS / "cumsum.py"), "cpu", EvalPolicy(compile_mode=None, trials=1, spares=0)) as ev:
        result = ev.evaluate(source, quick=True)
    assert (result.verdict, result.reason.value) == ("fail", "runtime_error"), (result.reason, result.detail)
    check = next(c for c in result.checks if c.name == "ordering")
    assert check.outcome == "fail" and "program-id order" in result.detail, result.detail
    _assert_names_the_helper(result.detail, source)


def test_only_the_candidates_frames_are_named_all_the_chain_down_and_a_cause_cycle_ends(tmp_path: Path) -> None:
    """Three levels of `raise ... from`, as the interpreter makes for a helper: the innermost line is named; the
    harness's frames (here, this test's) stay out of the detail; a cause chain that loops back on itself (a
    candidate's exception objects are its own) is walked once."""
    source = textwrap.dedent("""
        def inner():
            raise ValueError("inner failed")  # INNER

        def middle():
            try:
                inner()
            except ValueError as e:
                raise KeyError("middle failed") from e

        def outer():
            try:
                middle()
            except KeyError as e:
                err = RuntimeError("outer failed")
                e.__cause__.__cause__ = err  # a cycle
                raise err from e  # OUTER
    """)
    candidate = tmp_path / "kw_candidate.py"
    candidate.write_text(source)
    namespace: dict[str, object] = {}
    exec(compile(source, str(candidate), "exec"), namespace)
    with pytest.raises(RuntimeError) as info:
        namespace["outer"]()  # type: ignore[operator]
    detail = _describe(info.value, str(candidate))
    inner, outer = _line(source, "# INNER")[0], _line(source, "# OUTER")[0]
    assert f"candidate line {outer}, in outer: raise err from e" in detail, detail
    assert f"candidate line {inner}, in inner: raise ValueError" in detail, detail
    assert detail.index("in outer") < detail.index("in middle") < detail.index("in inner"), detail  # as the stack ran
    assert __file__ not in detail and "test_interpreter_errors" not in detail, detail
    assert detail.endswith("RuntimeError: outer failed"), detail


def test_an_exception_that_cannot_be_described_still_gets_a_reply() -> None:
    """A candidate's exception is the candidate's object: a `__str__` that raises, or a class whose module is not a
    string, must not turn the worker's reply into a crash."""
    from kernelwright.evaluators.worker import _error_kind

    class Hostile(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    Odd = type("InterpreterError", (Exception,), {"__module__": None})
    assert _describe(Hostile(), "/nowhere.py") == "Hostile: (its message could not be read)"
    assert _error_kind(Hostile()) == "exception"
    assert _describe(Odd("x"), "/nowhere.py").endswith("InterpreterError: x")
    long = _describe(RuntimeError("y" * 10_000), "/nowhere.py", limit=300)
    assert len(long) <= 300 and long.startswith("RuntimeError: yyy")
