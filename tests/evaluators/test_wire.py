"""The worker channel: values round-trip, and hostile frames raise WireError without ever unpickling.

A candidate shares its worker's process and can write any bytes to the channel, so the trusted side
must bound every frame and parse only JSON and raw tensor bytes. These tests write raw frames on a
socketpair, with no worker.
"""

from __future__ import annotations

import json
import pickle
import socket
import struct
import threading
from collections.abc import Iterator

import pytest
import torch

from kernelwright.evaluators import wire
from kernelwright.evaluators.wire import MAX_JSON, PeerClosed, WireError, WireTimeout, recv, send

_HEADER = struct.Struct("!QQ")
_LEN = struct.Struct("!Q")


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _frame(body: dict | bytes, tensors: list[bytes] = (), n_tensors: int | None = None) -> bytes:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    out = _HEADER.pack(len(raw), len(tensors) if n_tensors is None else n_tensors) + raw
    for t in tensors:
        out += _LEN.pack(len(t)) + t
    return out


def _send_raw(sock: socket.socket, data: bytes) -> None:
    # From a thread: a large frame would otherwise fill the socket buffer before anyone reads.
    t = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
    t.start()


def test_round_trip_of_every_value_kind(pair) -> None:
    a, b = pair
    tensors = {
        "f32": torch.randn(3, 4), "f64": torch.randn(2, dtype=torch.float64),
        "bf16": torch.randn(5).to(torch.bfloat16), "f16": torch.randn(5).half(),
        "i64": torch.arange(6).reshape(2, 3), "i8": torch.tensor([-3, 4], dtype=torch.int8),
        "u8": torch.tensor([0, 255], dtype=torch.uint8), "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5), "empty": torch.empty(0, 7), "transposed": torch.randn(4, 3).t(),
        "c64": torch.randn(3, dtype=torch.complex64),
    }
    payload = {"tensors": tensors, "nested": [1, 2.5, None, True, "s", (1, torch.ones(2)), {"k": [torch.zeros(1)]}],
               "dtype": torch.bfloat16, "nan": float("nan")}
    header = {"op": "call", "n": 3, "list": [1, "a"]}
    send(a, header, payload)
    h, p = recv(b, timeout=10)
    assert h == header
    for k, t in tensors.items():
        got = p["tensors"][k]
        assert got.dtype == t.dtype and got.shape == t.shape, k
        assert torch.equal(got, t.contiguous()), k
    assert p["nested"][:5] == [1, 2.5, None, True, "s"]
    assert isinstance(p["nested"][5], tuple) and torch.equal(p["nested"][5][1], torch.ones(2))
    assert torch.equal(p["nested"][6]["k"][0], torch.zeros(1))
    assert p["dtype"] is torch.bfloat16
    assert p["nan"] != p["nan"]


def test_received_tensors_are_bit_exact(pair) -> None:
    a, b = pair
    t = torch.tensor([0x7FE5A5A5, -1, 0], dtype=torch.int32).view(torch.float32)  # poison NaN, a NaN, zero
    send(a, {}, t)
    _, got = recv(b, timeout=10)
    assert torch.equal(got.view(torch.int32), t.view(torch.int32))


def test_unsendable_values_are_refused(pair) -> None:
    a, _ = pair
    with pytest.raises(WireError):
        send(a, {}, {"x": object()})
    with pytest.raises(WireError):
        send(a, {}, {"f": lambda: 1})


def test_oversized_json_header_is_refused_before_reading(pair) -> None:
    a, b = pair
    a.sendall(_HEADER.pack(MAX_JSON + 1, 0))
    with pytest.raises(WireError, match="too large"):
        recv(b, timeout=5)


def test_too_many_tensors_is_refused(pair) -> None:
    a, b = pair
    a.sendall(_HEADER.pack(2, 100_000) + b"{}")
    with pytest.raises(WireError, match="too large"):
        recv(b, timeout=5)


def test_payload_over_max_bytes_is_refused(pair) -> None:
    a, b = pair
    _send_raw(a, _frame({"tensors": [{"dtype": "uint8", "shape": [4096]}]}, [b"\0" * 4096]))
    with pytest.raises(WireError, match="larger than"):
        recv(b, timeout=5, max_bytes=1024)


def test_a_lying_length_is_refused_without_allocating_it(pair) -> None:
    a, b = pair
    a.sendall(_frame({"tensors": [{"dtype": "uint8", "shape": [1]}]}, n_tensors=1) + _LEN.pack(1 << 60))
    with pytest.raises(WireError, match="larger than"):
        recv(b, timeout=5, max_bytes=1 << 20)


@pytest.mark.parametrize("body", [
    b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94\x8c\x06system\x94\x93\x94.",  # a pickle
    b"{not json",
    b"\xff\xfe\xfd",
])
def test_non_json_bodies_are_refused_and_never_unpickled(pair, monkeypatch: pytest.MonkeyPatch, body: bytes) -> None:
    def no_unpickling(*a, **k):
        raise AssertionError("the channel must never unpickle")

    monkeypatch.setattr(pickle, "loads", no_unpickling)
    monkeypatch.setattr(pickle, "load", no_unpickling)
    monkeypatch.setattr(pickle, "Unpickler", no_unpickling)
    a, b = pair
    a.sendall(_frame(body))
    with pytest.raises(WireError, match="malformed"):
        recv(b, timeout=5)


def test_a_pickled_tensor_payload_is_only_bytes(pair) -> None:
    """Pickle bytes in a tensor slot arrive as a uint8 tensor of those bytes: data, never code."""
    a, b = pair
    evil = pickle.dumps(print)
    a.sendall(_frame({"tensors": [{"dtype": "uint8", "shape": [len(evil)]}], "payload": {"__tensor__": 0}}, [evil]))
    _, p = recv(b, timeout=5)
    assert isinstance(p, torch.Tensor) and bytes(p.tolist()) == evil


@pytest.mark.parametrize("body", [
    [1, 2, 3],                                                        # not an object
    {"tensors": "nope"},                                              # tensor table not a list
    {"tensors": [{"dtype": "float32", "shape": [1]}]},                # table longer than the count
])
def test_malformed_structure_is_refused(pair, body) -> None:
    a, b = pair
    a.sendall(_frame(json.dumps(body).encode(), n_tensors=0))
    with pytest.raises(WireError, match="malformed"):
        recv(b, timeout=5)


@pytest.mark.parametrize(("meta", "data"), [
    ({"dtype": "object", "shape": [1]}, b"\0" * 8),                  # unsupported dtype
    ({"dtype": "float32", "shape": [3]}, b"\0" * 8),                 # size does not match the shape
    ({"dtype": "float32", "shape": [-2]}, b"\0" * 8),                # negative dimension
    ({"dtype": "float32"}, b"\0" * 4),                               # no shape
    ({"dtype": "float32", "shape": ["x"]}, b"\0" * 4),               # shape not integers
])
def test_bad_tensor_entries_are_refused(pair, meta, data) -> None:
    a, b = pair
    a.sendall(_frame({"tensors": [meta]}, [data]))
    with pytest.raises(WireError):
        recv(b, timeout=5)


@pytest.mark.parametrize("ref", [{"__tensor__": 5}, {"__tensor__": "0"}, {"__tensor__": -1}, {"__dtype__": "evil"}])
def test_bad_references_are_refused(pair, ref) -> None:
    a, b = pair
    a.sendall(_frame({"tensors": [], "payload": ref}))
    with pytest.raises(WireError):
        recv(b, timeout=5)


def test_peer_closing_mid_frame_is_peer_closed(pair) -> None:
    a, b = pair
    a.sendall(_HEADER.pack(100, 0) + b'{"op"')
    a.close()
    with pytest.raises(PeerClosed):
        recv(b, timeout=5)


def test_silence_times_out(pair) -> None:
    _, b = pair
    with pytest.raises(WireTimeout):
        recv(b, timeout=0.3)


def test_poll_runs_while_waiting_and_can_abort(pair) -> None:
    _, b = pair
    calls = []

    def poll() -> None:
        calls.append(1)
        if len(calls) >= 2:
            raise RuntimeError("memory limit")

    with pytest.raises(RuntimeError, match="memory limit"):
        recv(b, timeout=10, poll=poll)
    assert len(calls) == 2


def test_wire_module_does_not_use_pickle() -> None:
    source = open(wire.__file__).read()
    assert "import pickle" not in source and "pickle." not in source
