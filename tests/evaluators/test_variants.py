"""Shape variants (`evaluators.variants`): built from a problem's size constants, the tail variant's sizes, a
problem executed at a variant (`problem_from_source(..., sizes=)`), and the hand-off keeping small and odd only."""

from __future__ import annotations

import pytest

from kernelwright.evaluators import ProblemError, problem_from_source
from kernelwright.evaluators.variants import TAIL_REMAINDER, shapes_for

ROWS = '''import torch
import torch.nn as nn

batch_size = 16
dim = 393216
KERNEL = 3


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim) * KERNEL]


def get_init_inputs():
    return []
'''

SHORT = ROWS.replace("dim = 393216", "dim = 512")


def test_the_three_variants_of_a_kernelbench_style_problem() -> None:
    shapes, dropped, sizes = shapes_for(ROWS, "rows.py", ("small", "odd", "tail"))
    assert sizes == {"batch_size": 16, "dim": 393216}  # KERNEL = 3 is not a size
    assert dropped == {}
    got = {s.name: (s.sizes, s.elements) for s in shapes}
    assert got["problem"] == ({}, 16 * 393216)
    assert got["small"] == ({"batch_size": 16, "dim": 3072}, 16 * 3072)
    assert got["odd"] == ({"batch_size": 13, "dim": 2305}, 13 * 2305)
    # the row keeps its real length, made a multiple of 1024 plus 37; fewer rows keep the inputs near 1M elements
    assert got["tail"] == ({"batch_size": 2, "dim": 383 * 1024 + TAIL_REMAINDER}, 2 * (383 * 1024 + 37))
    assert [s.label() for s in shapes][:2] == ["problem shapes", "small (batch_size=16, dim=3072)"]


def test_the_hand_off_default_has_no_tail_and_a_short_row_has_none() -> None:
    assert [s.name for s in shapes_for(ROWS, "rows.py")[0]] == ["problem", "small", "odd"]
    # a row of 512: no block plus remainder fits, so the row is made odd at its real magnitude
    shapes, dropped, _ = shapes_for(SHORT, "short.py", ("small", "odd", "tail"))
    assert {s.name: s.sizes for s in shapes}["tail"] == {"batch_size": 16, "dim": 511}
    tiny = ROWS.replace("dim = 393216", "dim = 40").replace("batch_size = 16", "batch_size = 12")
    shapes, dropped, _ = shapes_for(tiny, "tiny.py", ("small", "odd", "tail"))
    assert "tail" not in [s.name for s in shapes]
    assert dropped["tail"].startswith("no size constant reaches 64 (the largest is dim=40)")
    with pytest.raises(ValueError, match="unknown shape variant 'huge'"):
        shapes_for(ROWS, "rows.py", ("huge",))


def test_a_problem_at_a_variant_has_its_constants_set_and_a_digest_of_its_own() -> None:
    own = problem_from_source(ROWS, "rows.py")
    at = problem_from_source(ROWS, "rows.py", sizes={"batch_size": 3, "dim": 37})
    assert at.sizes == {"batch_size": 3, "dim": 37} and own.sizes == {}
    assert tuple(at.get_inputs()[0].shape) == (3, 37) and tuple(own.get_inputs()[0].shape) == (16, 393216)
    assert at.digest != own.digest
    with pytest.raises(ProblemError, match=r"^rows.py: has no module-level integer 'rows' to set to 4$"):
        problem_from_source(ROWS, "rows.py", sizes={"rows": 4})
    with pytest.raises(ProblemError, match=r"^rows.py: dim must be set to a positive integer, not 0$"):
        problem_from_source(ROWS, "rows.py", sizes={"dim": 0})


GROUPS = '''import torch
import torch.nn as nn

batch_size = 112
features = 64
num_groups = 8
dim1 = 512
dim2 = 512


class Model(nn.Module):
    def __init__(self, num_features, num_groups):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x):
        return self.gn(x)


def get_inputs():
    return [torch.rand(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [features, num_groups]
'''


def test_a_size_the_reference_refuses_to_see_odd_is_kept_and_the_others_still_vary() -> None:
    """KernelBench's GroupNorm: the channel count must stay a multiple of the group count, and no one size reaches a
    block plus its remainder; the odd variant still makes the other sizes odd, and the tail variant makes the two
    image sizes odd at their real magnitude (512 -> 511) with the channels as they are."""
    shapes, dropped, _ = shapes_for(GROUPS, "gn.py", ("small", "odd", "tail"))
    assert dropped == {}, dropped
    got = {s.name: s.sizes for s in shapes}
    assert got["odd"]["features"] == got["small"]["features"] and got["odd"]["features"] % 8 == 0
    assert all(v % 2 == 1 for k, v in got["odd"].items() if k != "features")
    assert got["tail"]["dim1"] == got["tail"]["dim2"] == 511 and got["tail"]["features"] == 64


WEIGHTS = '''import torch
import torch.nn as nn

batch_size = 256
in_features = 64
hidden = 96
groups = 8


class Model(nn.Module):
    def __init__(self, in_features, hidden, groups):
        super().__init__()
        self.gn = nn.GroupNorm(groups, in_features)
        self.linear = nn.Linear(in_features, hidden)

    def forward(self, x):
        return self.linear(self.gn(x))


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden, groups]
'''


def test_the_odd_variant_makes_the_weights_sizes_odd_where_the_reference_accepts_it() -> None:
    """hidden is read only by get_init_inputs (a Linear's output columns): the odd variant makes it odd, so a
    ragged last block of columns runs. The group count is kept (7 groups do not divide 64 channels), as is the
    channel count (47 channels are not a multiple of 8 groups); the small variant changes no weight size."""
    shapes, dropped, sizes = shapes_for(WEIGHTS, "w.py", ("small", "odd"))
    assert dropped == {} and sizes == {"batch_size": 256, "in_features": 64}
    got = {s.name: s.sizes for s in shapes}
    assert "hidden" not in got["small"] and "groups" not in got["small"]
    assert got["odd"]["hidden"] == 73 and "groups" not in got["odd"], got["odd"]
    assert got["odd"]["in_features"] == got["small"]["in_features"] == 64 and got["odd"]["batch_size"] % 2 == 1
