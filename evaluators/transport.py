"""How inputs reach a candidate worker and how its outputs come back to the judge.

Two ways, one interface:

- `SharedTransport` (CUDA): the worker allocates raw device buffers for the inputs and exports them;
  the trusted process opens them, copies the trial's inputs in on the device, and reads the candidate's
  outputs through handles the worker exports after the call. Nothing passes through host memory, and no
  allocation of the trusted process is ever mapped into the worker (`ipc.py`).
- `WireTransport` (the CPU, or a GPU where IPC is unavailable): tensors travel over the socket.

Either way the trusted process ends up with tensors it can read — the outputs and the inputs as the
candidate left them — and judges them itself.
"""

from __future__ import annotations

from typing import Any

import torch

from . import torch_private
from .compare import fingerprint
from .ipc import IpcError, Opener
from .pool import Worker, WorkerFault
from .result import Reason
from .wire import dtype_name


def layouts(inputs: list[Any]) -> list[Any]:
    return [{"shape": list(x.shape), "stride": list(x.stride())} if isinstance(x, torch.Tensor) else None
            for x in inputs]


def _nbytes(xs: list[Any]) -> int:
    return sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))


def _spec(x: Any) -> dict[str, Any] | None:
    if not isinstance(x, torch.Tensor):
        return None
    stride = list(x.stride())
    dense = all(s > 0 or n <= 1 for n, s in zip(x.shape, stride)) and not torch_private.has_internal_overlap(x)
    if not dense:  # an expanded or overlapping layout: the worker gets a contiguous copy
        stride, acc = [], 1
        for n in reversed(list(x.shape)):
            stride.append(acc)
            acc *= max(n, 1)
        stride.reverse()
    return {"shape": list(x.shape), "stride": stride, "dtype": dtype_name(x.dtype)}


class WireTransport:
    """Tensors over the socket, as host copies."""

    shared = False

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self._held: list[tuple[int, torch.Tensor]] = []

    def call(self, inputs: list[Any], *, reuse: bool, hold: bool, profile: bool, timeout: float, phase: str,
             compiles: bool, out_bytes: int = 0) -> tuple[dict[str, Any], list[torch.Tensor], list[torch.Tensor]]:
        header, payload = self.worker.request(
            {"op": "call", "layouts": layouts(inputs), "reuse": reuse, "profile": profile, "poison": True},
            {"inputs": inputs}, timeout, phase, max_bytes=2 * (out_bytes + _nbytes(inputs)) + (1 << 20),
            compiles=compiles)
        outs = list((payload or {}).get("outputs") or [])
        after = list((payload or {}).get("inputs_after") or [])
        return header, outs, after

    def keep(self, outs: list[torch.Tensor]) -> None:
        """Remember outputs for the final re-read (the worker holds its own; these are the copies sent)."""
        self._held.append((len(outs), list(outs)))  # type: ignore[arg-type]

    def release(self) -> None:
        return None

    def recheck(self, timeout: float) -> tuple[dict[str, Any], str | None]:
        total = sum(o.numel() * o.element_size() for _, outs in self._held for o in outs)  # type: ignore[union-attr]
        header, payload = self.worker.request({"op": "recheck"}, None, timeout, "the final re-read",
                                              max_bytes=total + (1 << 20) + (2 << 30))
        again = (payload or {}).get("outputs") or []
        flat = [o for _, outs in self._held for o in outs]  # type: ignore[union-attr]
        if len(again) < len(flat):
            return header, None  # the worker holds fewer than were kept here: compare what it has
        from .compare import bitwise_equal

        for k, (a, b) in enumerate(zip(again, flat)):
            if a.shape != b.shape or not bitwise_equal(a, b):
                return header, f"output {k}"
        return header, None

    # The timing, one repetition per request (`worker.Session.time_begin`): the judge decides after each
    # repetition whether to fetch its output and check it.

    def time_begin(self, sets: list[list[Any]], warmup: int, timeout: float) -> dict[str, Any]:
        header, _ = self.worker.request({"op": "time_begin", "warmup": warmup, "layouts": layouts(sets[0])},
                                        {"sets": sets}, timeout, "the timing's warm-up", max_bytes=1 << 20)
        return header

    def time_rep(self, i: int, timeout: float, phase: str) -> dict[str, Any]:
        header, _ = self.worker.request({"op": "time_rep", "set": i}, None, timeout, phase, max_bytes=1 << 20)
        return header

    def time_output(self, timeout: float, out_bytes: int) -> tuple[dict[str, Any], list[torch.Tensor]]:
        header, payload = self.worker.request({"op": "time_output"}, None, timeout, "sending a timed output",
                                              max_bytes=2 * out_bytes + (1 << 20))
        return header, list((payload or {}).get("outputs") or [])

    def time_done(self) -> None:
        """The judge is done with the outputs `time_output` returned (the wire's are copies: nothing to do)."""

    def time_end(self, timeout: float) -> dict[str, Any]:
        header, _ = self.worker.request({"op": "time_end"}, None, timeout, "ending the timing", max_bytes=1 << 20)
        return header

    def close(self) -> None:
        self._held.clear()


class SharedTransport:
    """Device buffers the worker owns, opened here through CUDA IPC: no host copies of large tensors."""

    shared = True

    def __init__(self, worker: Worker, device: torch.device) -> None:
        self.worker = worker
        self.device = device
        self.opener = Opener(device)
        self._specs: list[list[Any]] | None = None
        self._bufs: list[list[torch.Tensor | None]] = []
        self._buf_descs: list[Any] = []
        self._held: list[tuple[dict[str, Any], tuple[int, int]]] = []
        self._last_exports: list[dict[str, Any]] = []

    def _share(self, sets: list[list[Any]], reuse: bool, phase: str) -> None:
        specs = [[_spec(x) for x in s] for s in sets]
        if not (reuse and self._specs == specs):
            # The worker frees the old buffers and allocates new ones: forget their mappings first.
            self._bufs = []
            self._specs = None
            self.opener.forget(self._buf_descs)
            self._buf_descs = []
            header, _ = self.worker.request({"op": "buffers", "sets": specs, "reuse": False}, None, 120.0,
                                            f"allocating input buffers ({phase})")
            if not header.get("ok"):
                kind = header.get("kind", "out_of_memory")
                raise WorkerFault(Reason.OUT_OF_MEMORY if kind == "out_of_memory" else Reason.WORKER_ERROR,
                                  f"{phase}: {header.get('detail', '')}")
            descs = header.get("buffers") or []
            self._buf_descs = [d for ds in descs if isinstance(ds, list) for d in ds]
            if len(descs) != len(sets) or any(len(d) != len(s) for d, s in zip(descs, sets)):
                raise WorkerFault(Reason.WORKER_ERROR, f"{phase}: the worker's buffers do not match the inputs")
            try:
                self._bufs = [[self.opener.tensor(d) if d is not None else None for d in ds] for ds in descs]
            except IpcError as e:
                raise WorkerFault(Reason.WORKER_ERROR, f"{phase}: the worker's buffers cannot be opened ({e})") from None
            for bs, ss in zip(self._bufs, specs):
                for b, sp in zip(bs, ss):
                    if (b is None) != (sp is None) or (b is not None and (list(b.shape) != sp["shape"]
                                                                         or dtype_name(b.dtype) != sp["dtype"])):
                        raise WorkerFault(Reason.WORKER_ERROR, f"{phase}: the worker's buffers do not match the inputs")
            self._specs = specs
        with torch.no_grad():
            for bs, s in zip(self._bufs, sets):
                for b, x in zip(bs, s):
                    if b is not None:
                        b.copy_(x)
        torch.cuda.synchronize(self.device)

    def _outputs(self, header: dict[str, Any]) -> list[torch.Tensor]:
        try:
            return [self.opener.tensor(d) for d in header.get("exports") or []]
        except IpcError as e:
            raise WorkerFault(Reason.WORKER_ERROR, f"the candidate's outputs cannot be opened ({e})") from None

    def call(self, inputs: list[Any], *, reuse: bool, hold: bool, profile: bool, timeout: float, phase: str,
             compiles: bool, out_bytes: int = 0) -> tuple[dict[str, Any], list[torch.Tensor], list[torch.Tensor]]:
        self._share([inputs], reuse, phase)
        values = [None if isinstance(x, torch.Tensor) else x for x in inputs]
        header, _ = self.worker.request(
            {"op": "call", "shared": True, "hold": hold, "profile": profile, "poison": True}, {"inputs": values},
            timeout, phase, compiles=compiles)
        outs = self._outputs(header) if header.get("ok") else []
        self._last_exports = list(header.get("exports") or [])
        after = [b for b in self._bufs[0] if b is not None]
        return header, outs, after

    def keep(self, outs: list[torch.Tensor]) -> None:
        for d, o in zip(self._last_exports, outs):
            self._held.append((d, fingerprint(o)))

    def _forget_outputs(self) -> None:
        held = {d["handle"] for d, _ in self._held}
        self.opener.forget([d for d in self._last_exports if d.get("handle") not in held])
        self._last_exports = []

    def release(self) -> None:
        """The judge is done with the last call's outputs (no tensor over them is used after this)."""
        self._forget_outputs()
        header, _ = self.worker.request({"op": "release"}, None, 60.0, "releasing the outputs")
        if not header.get("ok"):
            raise WorkerFault(Reason.WORKER_ERROR, f"releasing the outputs failed: {header.get('detail', '')}")

    def recheck(self, timeout: float) -> tuple[dict[str, Any], str | None]:
        header, _ = self.worker.request({"op": "recheck", "shared": True}, None, timeout, "the final re-read")
        for k, (d, fp) in enumerate(self._held):
            try:
                t = self.opener.tensor(d)
            except IpcError:
                return header, f"output {k} (its memory is gone)"
            if fingerprint(t) != fp:
                return header, f"output {k}"
        return header, None

    def time_begin(self, sets: list[list[Any]], warmup: int, timeout: float) -> dict[str, Any]:
        self._forget_outputs()
        self.opener.forget([d for d, _ in self._held])  # the worker lets its held outputs go now
        self._held.clear()
        self._share(sets, False, "timing")
        values = [[None if isinstance(x, torch.Tensor) else x for x in s] for s in sets]
        header, _ = self.worker.request({"op": "time_begin", "shared": True, "warmup": warmup}, {"sets": values},
                                        timeout, "the timing's warm-up")
        return header

    def time_rep(self, i: int, timeout: float, phase: str) -> dict[str, Any]:
        self._forget_outputs()  # the worker drops the last repetition's outputs first
        header, _ = self.worker.request({"op": "time_rep", "set": i}, None, timeout, phase)
        return header

    def time_output(self, timeout: float, out_bytes: int) -> tuple[dict[str, Any], list[torch.Tensor]]:
        header, _ = self.worker.request({"op": "time_output"}, None, timeout, "sharing a timed output")
        self._last_exports = list(header.get("exports") or [])
        return header, self._outputs(header) if header.get("ok") else []

    def time_done(self) -> None:
        """Unmap the outputs `time_output` opened (no tensor over them may be used after this)."""
        torch.cuda.synchronize(self.device)
        self._forget_outputs()

    def time_end(self, timeout: float) -> dict[str, Any]:
        self._forget_outputs()
        header, _ = self.worker.request({"op": "time_end"}, None, timeout, "ending the timing")
        return header

    def close(self) -> None:
        """Unmap everything; call before the worker goes (no tensor from here may be used after)."""
        self._bufs = []
        self._held.clear()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.opener.close()
