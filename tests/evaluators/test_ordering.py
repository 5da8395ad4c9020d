"""The ordering check (docs/contract.md, "When programs may wait on one another"; docs/verifier.md, class 32): a
kernel that takes a ticket and spins on other programs' results is run in Triton's interpreter with programs one
at a time, in reverse and forward program-id order. The adversarial suite holds the candidates (`c32_*`,
`honest_ticket_scan`); these tests hold the mechanism's parts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from kernelwright.evaluators import EvalPolicy, Evaluator, Limits, load_problem

ROOT = Path(__file__).resolve().parents[1] / "adversarial"


def test_the_interpreter_runs_programs_in_the_order_asked() -> None:
    """Each program records its id at the ticket it drew: the tickets follow the order programs ran in."""
    code = textwrap.dedent("""
        import sys, torch, triton, triton.language as tl
        from kernelwright.evaluators.worker import _set_program_order

        @triton.jit
        def k(c, out):
            t = tl.atomic_add(c, 1)
            tl.store(out + t, tl.program_id(0))

        for order in ("reverse", "forward"):
            _set_program_order(order)
            c, out = torch.zeros(1, dtype=torch.int32), torch.full((6,), -1, dtype=torch.int32)
            k[(6,)](c, out)
            print(order, out.tolist())
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["reverse [5, 4, 3, 2, 1, 0]", "forward [0, 1, 2, 3, 4, 5]"]


def test_an_honest_ticket_wait_passes_the_ordering_check_and_says_so() -> None:
    src = (ROOT / "candidates" / "honest_ticket_scan.py").read_text()
    policy = EvalPolicy(compile_mode=None, trials=1, spares=0)
    with Evaluator(load_problem(ROOT / "problems" / "cumsum.py"), "cpu", policy) as ev:
        result = ev.evaluate(src)
    assert result.verdict == "pass", result.detail
    check = next(c for c in result.checks if c.name == "ordering")
    assert check.outcome == "pass" and "reverse and forward" in check.detail
    assert {"ordering_reverse_s", "ordering_forward_s"} <= set(result.phases)


def test_a_wait_the_check_cannot_run_is_refused(tmp_path: Path) -> None:
    """A problem with no size constants, too large for the interpreter at its own size: no small shape to run
    the check at, so the kernel may not wait (it fails closed, in one sentence, before any worker runs it)."""
    problem = tmp_path / "big_cumsum.py"
    problem.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                       "    def forward(self, x):\n        return torch.cumsum(x, dim=0)\n\n\n"
                       "def get_inputs():\n    return [torch.randn(1 << 21)]\n\n\ndef get_init_inputs():\n    return []\n")
    src = (ROOT / "candidates" / "honest_ticket_scan.py").read_text()
    policy = EvalPolicy(compile_mode=None, trials=1, spares=0, limits=Limits(call_s=5.0))
    with Evaluator(load_problem(problem), "cpu", policy) as ev:
        result = ev.evaluate(src)
    assert (result.verdict, result.reason.value, result.rule) == ("fail", "forbidden_code", "inter_program_wait")
    assert "cannot run for this problem" in result.detail
    assert "load" not in {c.name for c in result.checks}


def test_the_check_runs_once_per_source_and_evaluator() -> None:
    """A quick check, then the verdict of the same source on the same evaluator: the second says it passed before
    (its phases hold no second run); a variant evaluator with the check off runs none."""
    src = (ROOT / "candidates" / "honest_ticket_scan.py").read_text()
    with Evaluator(load_problem(ROOT / "problems" / "cumsum.py"), "cpu",
                   EvalPolicy(compile_mode=None, trials=1, spares=0)) as ev:
        first, second = ev.evaluate(src, quick=True), ev.evaluate(src)
    assert first.verdict == second.verdict == "pass", (first.detail, second.detail)
    assert "ordering_reverse_s" in first.phases and "ordering_reverse_s" not in second.phases
    assert next(c for c in second.checks if c.name == "ordering").detail.endswith("passed before")
    with Evaluator(load_problem(ROOT / "problems" / "cumsum.py"), "cpu",
                   EvalPolicy(compile_mode=None, trials=1, spares=0, ordering_check=False)) as ev:
        off = ev.evaluate(src, quick=True)
    assert off.verdict == "pass" and not [c for c in off.checks if c.name == "ordering"]
