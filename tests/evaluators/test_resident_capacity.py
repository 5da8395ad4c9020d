"""A grid more than one wave but less than two is said outright (issue 23): a persistent GroupNorm kernel on an
H100 launched 660 programs (5 per SM x 132 SMs, as its author meant) but compiled to 107 registers at 4 warps, so
4 programs fit per SM: 528 resident, and 132 ran as a second, partial wave while the others' ticket waits spun.
The model said: "A direct 'grid exceeds resident capacity' line would help." The quick check's compiled line and
the profile's launch line now say it, with the registers per thread at which one wave would hold the grid."""

from __future__ import annotations

from kernelwright.evaluators.facts import DeviceFacts, second_wave, waves_line
from kernelwright.evaluators.profiling import Profile, render

H100 = DeviceFacts(device="cuda:0", name="NVIDIA H100 80GB HBM3", timed=True, admission="", sms=132,
                   smem_per_sm_bytes=233472, regs_per_sm=65536, max_threads_per_sm=2048)
GN = {"registers": 107, "spills": 0, "num_warps": 4}
"""the issue's persistent kernel: 107 registers x 32 threads -> 3584 per warp (in 256s), 4 warps -> 4 per SM"""
SAID = ("grid exceeds resident capacity: 660 programs > 528 resident at once (4 per SM x 132 SMs, limited by "
        "registers: 107 per thread), so 132 wait for a second, partial wave (1.25 waves); at 96 registers or fewer, "
        "5 per SM would hold all 660")


def test_a_partial_second_wave_is_said_with_its_numbers() -> None:
    assert second_wave(660, GN, H100) == SAID
    assert waves_line([{"name": "_gn_persistent", "grids": [[64], [660]], "compiled": GN}], H100) == (
        f"compiled: _gn_persistent: grid 660 (107 registers, 0 spills, 4 warps); {SAID}")


def test_the_register_bound_is_the_occupancy_model_s() -> None:
    # 80 registers at 8 warps: 3 per SM (396 resident); 4 per SM need 64 or fewer (2048 per warp)
    assert second_wave(528, {"registers": 80, "num_warps": 8}, H100).endswith(
        "(1.33 waves); at 64 registers or fewer, 4 per SM would hold all 528")
    # shared memory binds (2 per SM): fewer registers would not help, so no bound is given
    said = second_wave(400, {"registers": 32, "num_warps": 4, "shared_bytes": 100_000}, H100)
    assert "limited by shared memory), so 136 wait" in said and "registers or fewer" not in said


def test_many_waves_and_one_wave_keep_today_s_wording() -> None:
    many = {"registers": 93, "spills": 0, "num_warps": 4, "shared_bytes": 16}
    assert second_wave(459776, many, H100) == ""
    assert waves_line([{"name": "_gn_fused_kernel", "grids": [[459776]], "compiled": many}], H100) == (
        "compiled: _gn_fused_kernel: grid 459776 (93 registers, 0 spills, 4 warps, 16 B shared); 5 programs per SM "
        "at once (limited by registers), so 459776 programs make 7e+02 waves on 132 SMs")
    assert second_wave(528, GN, H100) == ""  # exactly one wave
    assert "resident" not in waves_line([{"name": "k", "grids": [[528]], "compiled": GN}], H100)
    assert second_wave(1056, GN, H100) == ""  # two full waves
    assert second_wave(660, GN, DeviceFacts(device="cpu", name="cpu", timed=False, admission="")) == ""


def test_the_profile_s_launch_line_says_it() -> None:
    kernels = [{"name": "_gn_persistent", "launches": 4, "grids": [[64], [660]], "compiled": GN},
               {"name": "_gn_tail", "launches": 4, "grids": [[132]], "compiled": GN}]
    text = render(Profile(kernels=kernels, device=H100))
    line = next(ln for ln in text.splitlines() if ln.startswith("- _gn_persistent"))
    assert line.endswith(f"num_warps 4; {SAID}")
    assert "resident" not in next(ln for ln in text.splitlines() if ln.startswith("- _gn_tail"))
    # kept when the text is cut to fit, as the other high-priority lines are; without the device, nothing is said
    assert SAID in render(Profile(kernels=kernels, device=H100), limit=len(line) + 60)
    assert "resident" not in render(Profile(kernels=kernels))
