"""How long a run without a seed kernel waits for its first kernel's verdict (issue 24, item 5): the writer's model
is a scripted one that answers after a fixed delay (a real model takes tens of seconds to minutes), so the figure
is the delay plus whatever of the evaluator's set-up the model's time did not hide.

    python bench/startup_written.py [--delay 20] [--problem P --kernel K] [--device cpu] [--repeat 1] [--no-prepare]
        [--compile-mode default]

In process, like the tests (tests/agents/scripted.py): the run is created, the optimize graph is driven until its
seed node is done, and the time from the run's creation to the first kernel's verdict (the seed node's end) is
printed, with the model's own time, the verdict's phases and, when the run prepared its devices while the model
wrote (`Evaluations.prepare`), what that took (the run's `prepare/` records)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "agents"))
from scripted import Scripted, call  # noqa: E402

from kernelwright.agents.context import RunConfig, RunContext  # noqa: E402
from kernelwright.graphs.optimize import builder, initial_state  # noqa: E402
from kernelwright.tools.runstore import RunStore  # noqa: E402


class SlowWriter(Scripted):
    """The scripted model whose first answer (the kernel) comes after `delay_s`, as a real model's would."""

    delay_s: float = 20.0
    answered_at: list[float] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        if not self.answered_at:
            time.sleep(self.delay_s)
        self.answered_at.append(time.monotonic())
        return super()._generate(messages, stop, run_manager, **kwargs)


def one_run(problem: Path, kernel: str, device: str, delay_s: float, work: Path,
            compile_mode: str = "default") -> dict[str, Any]:
    run = RunStore(work).create(str(problem), problem.read_text(), {})
    t0 = time.monotonic()
    cfg = RunConfig(model="scripted:w", device=device, profile="off", branches=1, iterations=1, roofline_target=None,
                    compile_mode=compile_mode)
    run.update(config={"settings": cfg.as_dict()})
    model = SlowWriter(script=[call("write_kernel", {"source": kernel}, 0), call("finish", {}, 1)], delay_s=delay_s)
    ctx = RunContext.open(cfg, run, models={"scripted:w": model})
    verdict_at = None
    try:
        graph = builder().compile(checkpointer=InMemorySaver())
        for update in graph.stream(initial_state(), {"configurable": {"thread_id": "t"}}, context=ctx,
                                   stream_mode="updates"):
            if "seed" in update:
                verdict_at = time.monotonic() - t0
                break
    finally:
        ctx.close()
    info = run.info()
    h = info.config.seed_kernel
    ev = run.eval(h) if h else None
    prepared = {p.stem: json.loads(p.read_text()) for p in sorted((run.path / "prepare").glob("*.json"))} \
        if (run.path / "prepare").is_dir() else {}
    return {"first_verdict_s": round(verdict_at, 2) if verdict_at is not None else None,
            "model_answered_s": round(model.answered_at[0] - t0, 2) if model.answered_at else None,
            "verdict": (ev or {}).get("verdict"), "phases": (ev or {}).get("phases"), "prepared": prepared}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delay", type=float, default=20.0, help="seconds the writer's model takes (default 20)")
    ap.add_argument("--problem", default=str(ROOT / "tests" / "graphs" / "add_problem.py"))
    ap.add_argument("--kernel", default=str(ROOT / "tests" / "graphs" / "add_seed.py"),
                    help="the kernel the scripted model writes")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--compile-mode", default="default", help="the torch.compile baseline's mode (default, max-autotune)")
    ap.add_argument("--no-prepare", action="store_true",
                    help="as before issue 24's item 5: nothing set up while the model writes (the baseline figure)")
    ap.add_argument("--json", default=None, help="write the figures there too")
    args = ap.parse_args()
    if args.no_prepare:
        from kernelwright.tools.evaluation import Evaluations

        Evaluations.prepare = lambda self, devices: []  # type: ignore[method-assign]
    rows = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="kw-startup-written-") as work:
            row = one_run(Path(args.problem), Path(args.kernel).read_text(), args.device, args.delay, Path(work),
                          args.compile_mode)
        rows.append(row)
        phases = row["phases"] or {}
        print(f"first kernel's verdict {row['first_verdict_s']} s after the run's start (the model answered at "
              f"{row['model_answered_s']} s; verdict {row['verdict']}; its evaluation {phases.get('total_s')} s: "
              f"worker wait {phases.get('worker_wait_s')} s, worker start-up {phases.get('worker_startup_s')} s, "
              f"trials {phases.get('trials_s')} s)")
        print("  the verdict's phases: " + ", ".join(f"{k} {v}" for k, v in phases.items()))
        for device, rec in row["prepared"].items():
            print(f"  prepared {device} while the model wrote: {rec.get('outcome')} in {rec.get('seconds')} s "
                  f"({', '.join(f'{k} {v}' for k, v in (rec.get('phases') or {}).items())})")
    if args.json:
        Path(args.json).write_text(json.dumps({"argv": sys.argv[1:], "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
