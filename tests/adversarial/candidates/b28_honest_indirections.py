"""EXPECT: ok
EXPECT_RUNTIME: ok
PROBLEM: softmax_wide.py

Control for class 28: an honest softmax that goes through every indirection the b28 exploits use, on
innocent targets, so the guards that now judge the whole stack must still let it through: a dataclass
whose generated __init__ runs a default_factory, functools.partial, a property and a cached_property,
operator.attrgetter and getattr with a name built from pieces, PyTorch's no_grad decorator around the
candidate's own code, typing and enum helpers that read their caller's frame, and a tensor printed at
import (PyTorch switches dispatch modes off for itself to print).
"""

import dataclasses
import enum
import functools
import operator
import typing

import torch
import torch.nn as nn
import triton
import triton.language as tl

T = typing.TypeVar("T")


class Shape(typing.NamedTuple):
    rows: int
    cols: int


class Mode(enum.Enum):
    ROWS = 1


Layout = enum.Enum("Layout", "CONTIGUOUS")  # the functional API reads its caller's module name from a frame
print(torch.zeros(2))


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=m, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=m)


@dataclasses.dataclass
class Plan:
    sizes: list = dataclasses.field(default_factory=list)
    alloc: typing.Callable = dataclasses.field(default_factory=lambda: torch.empty_like)

    @property
    def block(self) -> int:
        return triton.next_power_of_2(self.sizes[-1])

    @functools.cached_property
    def rows(self) -> int:
        return functools.reduce(operator.mul, self.sizes[:-1], 1)


@torch.no_grad()
def launch(x: torch.Tensor) -> torch.Tensor:
    plan = Plan(list(operator.attrgetter("shape")(x)))
    y = plan.alloc(x)
    run = functools.partial(softmax_kernel[(plan.rows,)], BLOCK=plan.block)
    run(x, y, getattr(plan, "si" + "zes")[-1])
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.mode = Mode.ROWS

    def forward(self, x):
        return launch(x.contiguous())
