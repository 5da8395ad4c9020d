"""Device memory shared between a candidate worker and the trusted process, with no host copies.

Only the worker's memory is ever shared: the worker allocates a buffer (or has an output of its own),
exports a CUDA IPC handle for it, and the trusted process opens the handle and copies in or reads out
on the device. No allocation of the trusted process is ever mapped into a candidate's process, so a
kernel that scans around the pointers it was given finds only the worker's own memory.

The worker is hostile, so everything it says about a handle is checked: the trusted side opens it,
asks the driver for the real extent of the allocation it maps, and refuses a region that does not lie
inside it (a forged size would otherwise make the trusted process write out of bounds, and an illegal
address is a sticky error that would end the trusted CUDA context).

The CUDA driver API is reached through ctypes (libcuda is always there when a GPU is), so nothing
beyond PyTorch is needed; tensors over raw pointers are made with `__cuda_array_interface__`.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any

import torch

HANDLE_BYTES = 64
_LAZY_ENABLE_PEER_ACCESS = 0x1


class IpcError(Exception):
    """A CUDA IPC call failed; the message names the call and the driver's error."""


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


class _Driver:
    """The few driver calls IPC needs, bound once per process."""

    def __init__(self) -> None:
        lib = None
        for name in ("libcuda.so.1", "libcuda.so"):
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            raise IpcError("libcuda is not available")
        self.lib = lib
        u64, p = ctypes.c_uint64, ctypes.POINTER
        self.get_handle = self._fn("cuIpcGetMemHandle", p(_Handle), u64)
        self.open_handle = self._fn("cuIpcOpenMemHandle_v2", p(u64), _Handle, ctypes.c_uint) \
            or self._fn("cuIpcOpenMemHandle", p(u64), _Handle, ctypes.c_uint)
        self.close_handle = self._fn("cuIpcCloseMemHandle", u64)
        self.address_range = self._fn("cuMemGetAddressRange_v2", p(u64), p(ctypes.c_size_t), u64)
        self.alloc = self._fn("cuMemAlloc_v2", p(u64), ctypes.c_size_t)
        self.free = self._fn("cuMemFree_v2", u64)
        self.error_name = self._fn("cuGetErrorName", ctypes.c_int, p(ctypes.c_char_p))

    def _fn(self, name: str, *argtypes: Any) -> Any:
        fn = getattr(self.lib, name, None)
        if fn is None:
            return None
        fn.restype = ctypes.c_int
        fn.argtypes = list(argtypes)
        return fn

    def check(self, code: int, what: str) -> None:
        if code != 0:
            name = ctypes.c_char_p()
            self.error_name(code, ctypes.byref(name))
            raise IpcError(f"{what} failed: {(name.value or b'CUDA error %d' % code).decode()}")


_DRIVER: _Driver | None = None
_DRIVER_LOCK = threading.Lock()


def driver() -> _Driver:
    global _DRIVER
    with _DRIVER_LOCK:
        if _DRIVER is None:
            _DRIVER = _Driver()
        return _DRIVER


class _Raw:
    """A raw device allocation exposed to PyTorch through the CUDA array interface."""

    def __init__(self, ptr: int, nbytes: int, shape: list[int], stride: list[int], dtype: torch.dtype,
                 owner: Any = None) -> None:
        self.ptr, self.nbytes, self.owner = ptr, nbytes, owner
        item = torch.empty((), dtype=dtype).element_size()
        typestr = {torch.float64: "<f8", torch.float32: "<f4", torch.float16: "<f2", torch.bfloat16: "<f2",
                   torch.int64: "<i8", torch.int32: "<i4", torch.int16: "<i2", torch.int8: "|i1", torch.uint8: "|u1",
                   torch.bool: "|b1", torch.complex64: "<c8", torch.complex128: "<c16"}[dtype]
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "strides": tuple(s * item for s in stride), "typestr": typestr,
            "data": (ptr, False), "version": 2,
        }


def tensor_at(ptr: int, shape: list[int], stride: list[int], dtype: torch.dtype, device: torch.device,
              owner: Any = None) -> torch.Tensor:
    """A tensor viewing device memory at `ptr` (no copy); `owner` is kept alive as long as the tensor."""
    view_dtype = torch.int16 if dtype == torch.bfloat16 else dtype
    raw = _Raw(ptr, 0, shape, stride, view_dtype, owner)
    t = torch.as_tensor(raw, device=device)
    return t.view(dtype) if dtype == torch.bfloat16 else t


def span_bytes(shape: list[int], stride: list[int], dtype: torch.dtype) -> int:
    """Bytes from the first element to one past the last of a strided layout."""
    if any(s == 0 for s in shape):
        return 0
    item = torch.empty((), dtype=dtype).element_size()
    return (1 + sum((n - 1) * st for n, st in zip(shape, stride))) * item


# -- the worker's side ------------------------------------------------------------------------------


class Exported:
    """Worker memory another process may open: a raw buffer of our own, or the allocation under a tensor."""

    def __init__(self, tensor: torch.Tensor, handle: bytes, offset: int, raw_ptr: int | None = None) -> None:
        self.tensor, self.handle, self.offset, self.raw_ptr = tensor, handle, offset, raw_ptr

    def describe(self) -> dict[str, Any]:
        return {"handle": self.handle.hex(), "offset": self.offset, "shape": list(self.tensor.shape),
                "stride": list(self.tensor.stride()), "dtype": str(self.tensor.dtype).removeprefix("torch.")}

    def free(self) -> None:
        """Release a raw buffer (tensors over it must be gone first); an exported tensor is just dropped."""
        self.tensor = None  # type: ignore[assignment]
        if self.raw_ptr is not None:
            driver().check(driver().free(self.raw_ptr), "cuMemFree")
            self.raw_ptr = None


def allocate(shape: list[int], stride: list[int], dtype: torch.dtype, device: torch.device) -> Exported:
    """A fresh raw device buffer with this layout, outside PyTorch's caching allocator, exported for IPC.

    Its own allocation, so opening it exposes nothing else, and nothing the candidate does to the
    caching allocator (emptying it, changing its settings) can free or move it."""
    d = driver()
    nbytes = max(span_bytes(shape, stride, dtype), 1)
    ptr = ctypes.c_uint64()
    d.check(d.alloc(ctypes.byref(ptr), nbytes), f"cuMemAlloc of {nbytes} bytes")
    try:
        handle = _Handle()
        d.check(d.get_handle(ctypes.byref(handle), ptr.value), "cuIpcGetMemHandle")
    except IpcError:
        d.free(ptr.value)
        raise
    t = tensor_at(ptr.value, shape, stride, dtype, device)
    return Exported(t, _handle_bytes(handle), 0, raw_ptr=ptr.value)


def export(t: torch.Tensor) -> Exported:
    """Export the allocation holding tensor `t` (the caller keeps `t` alive while it is open elsewhere)."""
    d = driver()
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    d.check(d.address_range(ctypes.byref(base), ctypes.byref(size), t.data_ptr()), "cuMemGetAddressRange")
    handle = _Handle()
    d.check(d.get_handle(ctypes.byref(handle), base.value), "cuIpcGetMemHandle")
    return Exported(t, _handle_bytes(handle), t.data_ptr() - base.value)


def _handle_bytes(handle: _Handle) -> bytes:
    # All 64 bytes: `handle.reserved` would stop at the first NUL, as char arrays do in ctypes.
    return ctypes.string_at(ctypes.addressof(handle), HANDLE_BYTES)


# -- the trusted side -------------------------------------------------------------------------------


@dataclass
class _Mapping:
    base: int
    size: int


class Opener:
    """The trusted process's view of one worker's exported memory. Close it when the worker is done."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._maps: dict[bytes, _Mapping] = {}

    def tensor(self, desc: dict[str, Any]) -> torch.Tensor:
        """Open (once per handle) and return a tensor over the described region, checked against the
        allocation the driver actually mapped."""
        from .wire import dtype_from_name

        try:
            handle = bytes.fromhex(str(desc["handle"]))
            offset = int(desc["offset"])
            shape = [int(s) for s in desc["shape"]]
            stride = [int(s) for s in desc["stride"]]
            dtype = dtype_from_name(str(desc["dtype"]))
        except (KeyError, TypeError, ValueError) as e:
            raise IpcError(f"malformed buffer description ({e})") from None
        if len(handle) != HANDLE_BYTES or len(shape) != len(stride) or any(s < 0 for s in shape) or offset < 0 \
                or any(st < 0 for st in stride):
            raise IpcError("malformed buffer description")
        m = self._maps.get(handle)
        if m is None:
            d = driver()
            h = _Handle()
            ctypes.memmove(ctypes.addressof(h), handle, HANDLE_BYTES)
            ptr = ctypes.c_uint64()
            with torch.cuda.device(self.device):
                d.check(d.open_handle(ctypes.byref(ptr), h, _LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")
                base, size = ctypes.c_uint64(), ctypes.c_size_t()
                d.check(d.address_range(ctypes.byref(base), ctypes.byref(size), ptr.value), "cuMemGetAddressRange")
            m = _Mapping(base.value, size.value)
            self._maps[handle] = m
        need = span_bytes(shape, stride, dtype)
        if offset + need > m.size:
            raise IpcError(f"the buffer claims {need} bytes at offset {offset} of an allocation of {m.size} bytes")
        return tensor_at(m.base + offset, shape, stride, dtype, self.device, owner=self)

    def forget(self, descs: list[dict[str, Any] | None]) -> None:
        """Unmap the allocations behind these descriptions (tensors over them must no longer be used).

        Needed before the worker frees and reallocates: a new allocation at an address still mapped here
        cannot be opened again (CUDA_ERROR_ALREADY_MAPPED)."""
        d = None
        for desc in descs:
            if not desc:
                continue
            try:
                handle = bytes.fromhex(str(desc["handle"]))
            except (KeyError, ValueError):
                continue
            m = self._maps.pop(handle, None)
            if m is None:
                continue
            d = d or driver()
            try:
                with torch.cuda.device(self.device):
                    d.close_handle(m.base)
            except Exception:  # noqa: BLE001 - best effort
                pass

    def close(self) -> None:
        """Unmap everything opened (tensors over the mappings must no longer be used)."""
        d = driver() if self._maps else None
        for m in self._maps.values():
            try:
                with torch.cuda.device(self.device):
                    d.close_handle(m.base)  # type: ignore[union-attr]
            except Exception:  # noqa: BLE001 - best effort: the worker is gone or going
                pass
        self._maps.clear()
