"""Which device a run uses, and one clear sentence when the asked-for one does not exist."""

from __future__ import annotations

import torch


class DeviceError(Exception):
    """The requested device is unusable; the message is one sentence."""


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device: str | torch.device | None) -> torch.device:
    """`cpu`, `cuda` or `cuda:N` (None: cuda when a GPU is present, else cpu)."""
    if device is None:
        device = default_device()
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise DeviceError(f"unknown device {device!r}: use cpu, cuda or cuda:N") from e
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise DeviceError(f"unsupported device {device!r}: use cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise DeviceError(f"--device {device}: no CUDA GPU is visible on this machine (use --device cpu)")
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise DeviceError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return torch.device("cuda", index)
