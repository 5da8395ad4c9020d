"""The message format between the trusted process and a candidate worker.

A message is a JSON header plus raw tensor payloads, framed by lengths. The trusted side never
unpickles anything a worker sends: a hostile candidate shares the worker's process and can write any
bytes to the channel, so every frame is size-bounded and parsed as plain JSON and raw bytes.

Values inside the header may reference tensors as ``{"__tensor__": i}``; tuples travel as
``{"__tuple__": [...]}``. Allowed Python values: None, bool, int, float, str, list, tuple, dict with str
keys, torch.dtype (as ``{"__dtype__": "float32"}``) and torch.Tensor.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any

import torch

_HEADER = struct.Struct("!QQ")  # json length, number of tensor payloads
_LEN = struct.Struct("!Q")
MAX_JSON = 16 << 20

_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64, torch.float32, torch.float16, torch.bfloat16,
        torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
        torch.complex64, torch.complex128,
    )
}


class WireError(Exception):
    """The peer sent something malformed, too large, or closed the channel."""


class PeerClosed(WireError):
    """The peer closed the channel (it exited or crashed)."""


class WireTimeout(WireError):
    """No complete message arrived in time."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError as e:
        raise WireError(f"unsupported dtype {name!r}") from e


def _encode(value: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return {"__tensor__": len(tensors) - 1}
    if isinstance(value, torch.dtype):
        return {"__dtype__": dtype_name(value)}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, tensors) for v in value]}
    if isinstance(value, list):
        return [_encode(v, tensors) for v in value]
    if isinstance(value, dict):
        return {str(k): _encode(v, tensors) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise WireError(f"cannot send a value of type {type(value).__name__}")


def _decode(value: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if isinstance(value, dict):
        if len(value) == 1:
            (key, inner), = value.items()
            if key == "__tensor__":
                if not isinstance(inner, int) or not 0 <= inner < len(tensors):
                    raise WireError("bad tensor reference")
                return tensors[inner]
            if key == "__tuple__":
                return tuple(_decode(v, tensors) for v in inner)
            if key == "__dtype__":
                return dtype_from_name(inner)
        return {k: _decode(v, tensors) for k, v in value.items()}
    return value


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """The raw bytes of a tensor's values in row-major order (copied to the CPU if needed)."""
    flat = t.detach().contiguous().reshape(-1)
    if flat.device.type != "cpu":
        flat = flat.cpu()
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")


def send(sock: socket.socket, header: dict[str, Any], payload: Any = None, timeout: float | None = None) -> None:
    """Send a header dict and an optional payload value (which may hold tensors).

    `timeout` bounds each blocking write, so a peer that stops reading cannot hang the sender.
    """
    tensors: list[torch.Tensor] = []
    body = dict(header)
    body["payload"] = _encode(payload, tensors)
    meta = [{"dtype": dtype_name(t.dtype), "shape": list(t.shape)} for t in tensors]
    body["tensors"] = meta
    raw = json.dumps(body, allow_nan=True).encode()
    sock.settimeout(timeout)
    try:
        _send_all(sock, raw, tensors)
    except socket.timeout as e:
        raise WireTimeout("timed out sending to the peer") from e
    except OSError as e:
        raise PeerClosed(str(e)) from e


def _send_all(sock: socket.socket, raw: bytes, tensors: list[torch.Tensor]) -> None:
    sock.sendall(_HEADER.pack(len(raw), len(tensors)) + raw)
    for t in tensors:
        data = tensor_bytes(t)
        sock.sendall(_LEN.pack(data.nbytes))
        sock.sendall(data)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None, poll: Any = None) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        left = 0.5 if deadline is None else deadline - time.monotonic()
        if left <= 0:
            raise WireTimeout("timed out waiting for the peer")
        sock.settimeout(min(left, 0.5))
        try:
            k = sock.recv_into(view[got:], n - got)
        except socket.timeout:
            if poll is not None:
                poll()
            continue
        except OSError as e:
            raise PeerClosed(str(e)) from e
        if k == 0:
            raise PeerClosed("the peer closed the channel")
        got += k
    return buf


def recv(
    sock: socket.socket,
    timeout: float | None = None,
    max_bytes: int = 1 << 34,
    poll: Any = None,
) -> tuple[dict[str, Any], Any]:
    """Receive one message: (header, payload). Raises WireTimeout, PeerClosed or WireError.

    `poll`, when given, is called about twice a second while waiting; it may raise to abort
    (the trusted side uses it to stop on a memory-limit breach).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    head = _recv_exact(sock, _HEADER.size, deadline, poll)
    n_json, n_tensors = _HEADER.unpack(head)
    if n_json > MAX_JSON or n_tensors > 4096:
        raise WireError("message header too large")
    try:
        body = json.loads(_recv_exact(sock, n_json, deadline, poll))
    except (ValueError, UnicodeDecodeError) as e:
        raise WireError(f"malformed message: {e}") from e
    if not isinstance(body, dict):
        raise WireError("malformed message: not an object")
    meta = body.pop("tensors", [])
    if not isinstance(meta, list) or len(meta) != n_tensors:
        raise WireError("malformed message: tensor table")
    tensors: list[torch.Tensor] = []
    total = 0
    for m in meta:
        (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size, deadline, poll))
        total += n
        if total > max_bytes:
            raise WireError(f"message larger than the {max_bytes} bytes allowed")
        try:
            dtype = dtype_from_name(m["dtype"])
            shape = [int(s) for s in m["shape"]]
        except (KeyError, TypeError, ValueError) as e:
            raise WireError("malformed tensor entry") from e
        data = _recv_exact(sock, n, deadline, poll)
        numel = 1
        for s in shape:
            numel *= s
        itemsize = torch.empty((), dtype=dtype).element_size()
        if numel * itemsize != n or any(s < 0 for s in shape):
            raise WireError("tensor size does not match its shape")
        if n == 0:
            tensors.append(torch.empty(shape, dtype=dtype))
            continue
        raw = torch.frombuffer(data, dtype=torch.uint8)
        t = raw.view(torch.uint8 if dtype == torch.bool else dtype)
        if dtype == torch.bool:
            t = t.view(torch.bool)
        tensors.append(t.reshape(shape))
    payload = _decode(body.pop("payload", None), tensors)
    return body, payload
