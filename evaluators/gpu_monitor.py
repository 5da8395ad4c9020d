"""The GPU's clocks and throttle reasons through NVML, read by the trusted process around every measurement.

A timing taken while the GPU was power- or thermally-throttled, or at a different SM clock than its
baseline, is not comparable; the reading goes into the result so a user can see it. Without NVML the
reading says why it is unavailable.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
BENIGN = {"gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock_setting"}

_state: dict[str, Any] = {}


def _nvml() -> Any:
    if "nvml" not in _state:
        try:
            import pynvml

            pynvml.nvmlInit()
            _state["nvml"] = pynvml
        except Exception as e:  # noqa: BLE001 - any NVML failure means "unavailable", with why
            _state["nvml"] = None
            _state["why"] = f"NVML unavailable: {e}"
    return _state["nvml"]


def _physical_index(index: int) -> int:
    import os

    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if ids and index < len(ids) and ids[index].isdigit():
        return int(ids[index])
    return index


def read(index: int = 0) -> dict[str, Any]:
    """SM and memory clocks (MHz), temperature (C), power (W) and active throttle reasons of one GPU."""
    nv = _nvml()
    if nv is None:
        return {"available": False, "why": _state.get("why", "NVML unavailable")}
    try:
        h = nv.nvmlDeviceGetHandleByIndex(_physical_index(index))
        mask = nv.nvmlDeviceGetCurrentClocksEventReasons(h) if hasattr(nv, "nvmlDeviceGetCurrentClocksEventReasons") \
            else nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)
        reasons = [name for bit, name in _REASONS.items() if mask & bit]
        return {
            "available": True,
            "sm_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "mem_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            "max_sm_clock_mhz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
            "temperature_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "throttle": reasons,
            "throttled": any(r not in BENIGN for r in reasons),
        }
    except Exception as e:  # noqa: BLE001
        return {"available": False, "why": f"NVML read failed: {e}"}
