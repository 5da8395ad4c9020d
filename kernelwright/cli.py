"""The `kernelwright` command.

Exit status: 0 when the candidate is verified correct, 1 when it is rejected, 2 for a usage error, a
broken problem or an unusable device. With `--json`, stdout carries exactly one JSON object.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    name="kernelwright",
    help="Make GPU kernels faster, judged by a verifier nothing can fool.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
out = Console()


class PrecisionOpt(str, Enum):
    fp32 = "fp32"
    tf32 = "tf32"
    bf16 = "bf16"
    fp16 = "fp16"


def _usage_error(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}")
    return typer.Exit(2)


def _json_error(message: str) -> None:
    sys.stdout.write(json.dumps({"verdict": "error", "reason": "usage_error", "detail": message}) + "\n")


@app.callback()
def _root(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="log what happens underneath")] = False) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")


@app.command("eval")
def eval_cmd(
    problem: Annotated[Path, typer.Argument(help="problem file (KernelBench format: Model, get_inputs, get_init_inputs)")],
    candidate: Annotated[Path, typer.Argument(help="candidate file defining ModelNew with Triton kernels")],
    device: Annotated[Optional[str], typer.Option(help="cpu, cuda or cuda:N (default: cuda when a GPU is present)")] = None,
    precision: Annotated[Optional[PrecisionOpt], typer.Option(help="precision contract (default: the problem's PRECISION, else fp32)")] = None,
    trials: Annotated[int, typer.Option(min=1, max=100, help="trials per input family")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="print exactly one JSON object on stdout")] = False,
) -> None:
    """Verify a candidate kernel against a problem (and time it on a GPU)."""
    from kernelwright.evaluators import DeviceError, EvalPolicy, Evaluator, ProblemError, load_problem, resolve_device

    def fail(message: str) -> typer.Exit:
        if as_json:
            _json_error(message)
            return typer.Exit(2)
        return _usage_error(message)

    if not candidate.is_file():
        raise fail(f"{candidate}: no such candidate file")
    try:
        source = candidate.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise fail(f"{candidate}: cannot be read ({e})") from None
    try:
        dev = resolve_device(device)
        if dev.type == "cpu":
            os.environ.setdefault("TRITON_INTERPRET", "1")
        prob = load_problem(problem, precision.value if precision else None)
        policy = EvalPolicy(trials=trials)
        with Evaluator(prob, str(dev), policy) as evaluator:
            result = evaluator.evaluate(source)
    except (ProblemError, DeviceError) as e:
        raise fail(str(e)) from None
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(130) from None

    if as_json:
        sys.stdout.write(result.model_dump_json() + "\n")
    else:
        _print_result(result, prob.path, str(candidate))
    raise typer.Exit(0 if result.passed else 1)


def _print_result(result, problem: str, candidate: str) -> None:  # type: ignore[no-untyped-def]
    colour = "green" if result.passed else "red"
    out.print(f"[bold {colour}]{result.verdict.upper()}[/] [dim]{result.reason}[/]  {candidate} on {problem} "
              f"({result.device}, {result.precision})")
    if result.detail:
        out.print(result.detail, markup=False, highlight=False)
    if result.rule:
        out.print(f"rule: {result.rule}")
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("check")
    table.add_column("outcome")
    table.add_column("detail", overflow="fold")
    for c in result.checks:
        style = {"pass": "green", "fail": "red", "skip": "yellow", "info": "cyan"}[c.outcome]
        table.add_row(c.name, f"[{style}]{c.outcome}[/]", c.detail)
    out.print(table)
    for flag in result.problem_flags:
        out.print(f"[yellow]problem flag:[/] {flag}")
    if result.timing is None:
        out.print(f"[dim]timing: unavailable ({result.timing_unavailable})[/]")
    phases = ", ".join(f"{k} {v:.2f}" for k, v in result.phases.items())
    out.print(f"[dim]phases (s): {phases}[/]")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
