"""Poison laid in the worker's free device memory before every call, outside any timed region.

A fresh allocation a candidate makes during a forward must hold a recognisable poison, so that output it
never wrote fails the comparison (and is named "never written") instead of passing on stale values. Filling
each allocation as it is made costs time inside the forward, so it could only be done in the correctness
trials — and then a kernel could tell a checked call from a timed one by looking for the poison (docs/verifier.md
item 30). Instead, before every call, checked or timed alike, the worker fills every free block of PyTorch's
caching allocator on its device with the poison: whatever the forward then allocates from the cache already
holds it, at no cost inside the call. Only an allocation the cache cannot serve (new device memory, whose
contents are unknown) is still filled as it is made (`covers`; `guards.OpRecorder` does it), the same in every call.

The pattern is one 16-bit word, 0xFFF5, repeated: a quiet NaN as float16 and bfloat16, and read as float32
(0xFFF5FFF5) or float64 also a NaN, so a never-written element fails in every floating dtype. Runs inside the
untrusted worker: what it does only decides what the candidate's memory holds; the verdict is the trusted
side's.
"""

from __future__ import annotations

import bisect
from typing import Any

import torch

from .compare import POISON_BITS

WORD_INT16 = POISON_BITS[torch.int16]
"""the 16-bit poison word, 0xFFF5, as int16"""


class Prepoison:
    """The free device memory poisoned before the current call, as sorted address ranges."""

    def __init__(self, device: torch.device, tensor_at: Any) -> None:
        self.device = device
        self._tensor_at = tensor_at
        self._starts: list[int] = []
        self._ends: list[int] = []
        self.bytes = 0
        """bytes poisoned before the current call"""

    def lay(self) -> None:
        """Fill every inactive block of the caching allocator on this device with the poison word, and
        remember where. Call with the device synchronised, before the call's timed region."""
        ranges: list[tuple[int, int]] = []
        index = self.device.index or 0
        for seg in torch.cuda.memory_snapshot():
            if seg.get("device", index) != index:
                continue
            at = int(seg.get("address", 0))
            for block in seg.get("blocks", []):  # in address order; older versions give no block address
                addr, size = int(block.get("address", at)), int(block.get("size", 0))
                at = addr + size
                if block.get("state") == "inactive" and addr and size >= 2:
                    ranges.append((addr, size & ~1))
        ranges.sort()
        starts, ends = [], []
        total = 0
        for addr, size in ranges:
            view = self._tensor_at(addr, [size // 2], [1], torch.int16, self.device)
            view.fill_(WORD_INT16)
            del view
            starts.append(addr)
            ends.append(addr + size)
            total += size
        self._starts, self._ends, self.bytes = starts, ends, total

    def clear(self) -> None:
        self._starts, self._ends, self.bytes = [], [], 0

    def covers(self, t: torch.Tensor) -> bool:
        """Whether `t`'s storage lies inside memory poisoned before this call (so filling it again is not
        needed). Memory freed and reallocated within the same call holds only what this call wrote."""
        if not self._starts or t.device.type != "cuda":
            return False
        st = t.untyped_storage()
        lo, n = st.data_ptr(), st.nbytes()
        k = bisect.bisect_right(self._starts, lo) - 1
        return k >= 0 and lo + n <= self._ends[k]
