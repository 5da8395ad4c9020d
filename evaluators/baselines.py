"""Baselines, timed in the trusted process only: PyTorch eager and `torch.compile` of the reference.

A candidate never shares a process with a baseline, so it cannot slow one down. TF32 is enabled for a
baseline exactly when the precision contract allows it for the candidate. Compiling is the expensive
part, so a compiled model is kept for the evaluator's lifetime and its median is also cached on disk per
problem, device, precision, compile mode, input shapes and library versions (for one-shot `eval` runs).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import torch
import triton

from .reference import ReferenceSession, tf32_mode
from .roofline import cache_dir
from .timing import Samples, flush_buffer, measure

log = logging.getLogger(__name__)


class BaselineTimer:
    """Times the reference model (eager and compiled) on a pool of input sets with `timing.measure`."""

    def __init__(self, reference: ReferenceSession, compile_mode: str | None = "default") -> None:
        self.ref = reference
        self.device = reference.device
        self.compile_mode = compile_mode
        self._compiled: Any = None
        self._compile_error: str | None = None
        self._flush: torch.Tensor | None = None

    @property
    def flush(self) -> torch.Tensor:
        if self._flush is None:
            self._flush = flush_buffer(self.device)
        return self._flush

    def _time(self, model: Any, pool: list[list[Any]], reps: int, warmup: int) -> Samples:
        def run(i: int) -> Any:
            return model(*pool[i])

        with torch.no_grad(), tf32_mode(self.ref.precision.allows_tf32):
            return measure(run, len(pool), self.device, reps=reps, warmup=warmup, flush=self.flush)

    def eager(self, pool: list[list[Any]], reps: int, warmup: int = 3) -> Samples:
        return self._time(self.ref.native, pool, reps, warmup)

    def cache_key(self, pool: list[list[Any]]) -> str:
        shapes = [[(tuple(x.shape), str(x.dtype)) if isinstance(x, torch.Tensor) else repr(x) for x in s]
                  for s in pool[:1]]
        raw = json.dumps([self.ref.problem.digest, torch.cuda.get_device_name(self.device), self.ref.precision.value,
                          self.compile_mode, shapes, torch.__version__, triton.__version__, torch.version.cuda],
                         default=str)
        return hashlib.sha256(raw.encode()).hexdigest()[:20]

    def compiled(self, pool: list[list[Any]], reps: int, warmup: int = 3) -> tuple[dict[str, float] | None, str | None]:
        """The compiled baseline's summary (from the disk cache when present), or None and why not."""
        if self.compile_mode is None:
            return None, "disabled"
        path = cache_dir() / "baselines" / f"compile-{self.cache_key(pool)}.json"
        if self._compiled is None and path.exists():
            try:
                return json.loads(path.read_text()), None
            except ValueError:
                pass
        if self._compile_error:
            return None, self._compile_error
        try:
            if self._compiled is None:
                with tf32_mode(self.ref.precision.allows_tf32):
                    self._compiled = torch.compile(self.ref.native, mode=self.compile_mode)
            summary = self._time(self._compiled, pool, reps, max(warmup, 3)).summary()
        except Exception as e:  # noqa: BLE001 - a reference Inductor cannot compile is reported, not fatal
            self._compile_error = f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            log.warning("%s", self._compile_error)
            return None, self._compile_error
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary))
        return summary, None
