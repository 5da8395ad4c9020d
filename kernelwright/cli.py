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


class CompileMode(str, Enum):
    default = "default"
    max_autotune = "max-autotune"
    reduce_overhead = "reduce-overhead"
    none = "none"


class PrecisionOpt(str, Enum):
    fp32 = "fp32"
    tf32 = "tf32"
    bf16 = "bf16"
    fp16 = "fp16"


def _usage_error(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}")
    return typer.Exit(2)


def _json_error(message: str) -> None:
    """--json still means exactly one JSON object on stdout, also for errors."""
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
    compile_mode: Annotated[CompileMode, typer.Option(help="torch.compile mode of the compiled baseline")] = CompileMode.default,
    as_json: Annotated[bool, typer.Option("--json", help="print exactly one JSON object on stdout")] = False,
) -> None:
    """Verify a candidate kernel against a problem (and time it on a GPU)."""
    result, prob = _evaluate(problem, candidate, device, precision, trials, compile_mode, as_json)
    if as_json:
        sys.stdout.write(result.model_dump_json() + "\n")
    else:
        _print_result(result, prob.path, str(candidate))
    raise typer.Exit(0 if result.passed else 1)


@app.command("profile")
def profile_cmd(
    problem: Annotated[Path, typer.Argument(help="problem file (KernelBench format)")],
    candidate: Annotated[Path, typer.Argument(help="candidate file defining ModelNew with Triton kernels")],
    device: Annotated[Optional[str], typer.Option(help="cpu, cuda or cuda:N (default: cuda when a GPU is present)")] = None,
    precision: Annotated[Optional[PrecisionOpt], typer.Option(help="precision contract")] = None,
    ncu: Annotated[bool, typer.Option("--ncu", help="also collect Nsight Compute metrics (needs ncu and counter access)")] = False,
    compile_mode: Annotated[CompileMode, typer.Option(help="torch.compile mode of the compiled baseline")] = CompileMode.default,
    as_json: Annotated[bool, typer.Option("--json", help="print exactly one JSON object on stdout")] = False,
) -> None:
    """Verify, time and profile a candidate: kernel resources, device-time breakdown, Nsight Compute metrics."""
    from kernelwright.evaluators import DeviceError, EvalPolicy, Evaluator, ProblemError, load_problem, resolve_device

    source = _read_candidate(candidate, as_json)
    try:
        dev = resolve_device(device)
        prob = load_problem(problem, precision.value if precision else None)
        with Evaluator(prob, str(dev), EvalPolicy(compile_mode=_mode(compile_mode))) as evaluator:
            prof = evaluator.profile(source, ncu=ncu)
    except (ProblemError, DeviceError) as e:
        raise _fail(str(e), as_json) from None
    if as_json:
        sys.stdout.write(prof.model_dump_json() + "\n")
    else:
        colour = "green" if prof.verdict == "pass" else "red"
        out.print(f"[bold {colour}]{prof.verdict.upper()}[/] [dim]{prof.reason}[/]  {candidate} on {problem}")
        out.print(prof.text, markup=False, highlight=False)
    raise typer.Exit(0 if prof.verdict == "pass" else 1)


def _fail(message: str, as_json: bool) -> typer.Exit:
    if as_json:
        _json_error(message)
        return typer.Exit(2)
    return _usage_error(message)


def _read_candidate(candidate: Path, as_json: bool) -> str:
    if not candidate.is_file():
        raise _fail(f"{candidate}: no such candidate file", as_json)
    try:
        return candidate.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise _fail(f"{candidate}: cannot be read ({e})", as_json) from None


def _mode(mode: CompileMode) -> str | None:
    return None if mode is CompileMode.none else mode.value


def _evaluate(problem: Path, candidate: Path, device: str | None, precision: PrecisionOpt | None, trials: int,
              compile_mode: CompileMode, as_json: bool):  # type: ignore[no-untyped-def]
    from kernelwright.evaluators import DeviceError, EvalPolicy, Evaluator, ProblemError, load_problem, resolve_device

    source = _read_candidate(candidate, as_json)
    try:
        dev = resolve_device(device)
        prob = load_problem(problem, precision.value if precision else None)
        policy = EvalPolicy(trials=trials, compile_mode=_mode(compile_mode))
        with Evaluator(prob, str(dev), policy) as evaluator:
            return evaluator.evaluate(source), prob
    except (ProblemError, DeviceError) as e:
        raise _fail(str(e), as_json) from None


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
    t = result.timing
    if t is None:
        out.print(f"[dim]timing: unavailable ({result.timing_unavailable})[/]")
    else:
        line = (f"time {t['median_ms']:.4g} ms (p25 {t['p25_ms']:.4g} – p75 {t['p75_ms']:.4g}, {t['reps']} reps); "
                f"eager {t['eager_ms']:.4g} ms → {t['speedup_vs_eager']:.2f}× ({t['vs_eager']})")
        if t.get("compile_ms"):
            line += f"; torch.compile {t['compile_ms']:.4g} ms → {t['speedup_vs_compile']:.2f}× ({t['vs_compile']})"
        out.print(line + f"; noise band ±{t['noise_band']:.1%}", markup=False, highlight=False)
        if t.get("floor_ms"):
            out.print(f"roofline floor {t['floor_ms']:.4g} ms ({t['bound']}-bound): {t['fraction_of_floor']:.0%} of the floor",
                      markup=False, highlight=False)
        for flag in t.get("suspect", []):
            out.print(f"[bold yellow]suspect:[/] {flag}")
    phases = ", ".join(f"{k} {v:.2f}" for k, v in result.phases.items())
    out.print(f"[dim]phases (s): {phases}[/]")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
