"""A problem's kinds (issue 23, item 2): read from its reference's ATen ops on the meta device, and from its source
when the forward cannot run there. No GPU: nothing is allocated."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelwright.evaluators.kinds import kinds_of_ops, problem_kinds, source_kinds

ROOT = Path(__file__).resolve().parents[2]

TEMPLATE = '''
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}

    def forward(self, {args}):
        return {body}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''


def problem(body: str, inputs: str, args: str = "x", init: str = "        pass") -> str:
    return TEMPLATE.format(body=body, inputs=inputs, args=args, init=init)


CASES = {
    # a layer norm over a few huge rows: shapes far too large to allocate, which the meta device never does
    "layer norm": (problem("self.ln(x)", "torch.randn(16, 64, 256, 256)", init="        self.ln = nn.LayerNorm((64, 256, 256))"),
                   ("row_reduction",)),
    "softmax": (problem("torch.softmax(x, dim=1)", "torch.randn(4096, 393216)"), ("row_reduction",)),
    "matmul": (problem("torch.matmul(a, b)", "torch.randn(4096, 4096), torch.randn(4096, 4096)", "a, b"), ("matmul",)),
    "gemm, relu, sum": (problem("torch.relu(self.l(x)).sum(dim=1)", "torch.randn(128, 1024)",
                                init="        self.l = nn.Linear(1024, 512)"), ("matmul", "row_reduction")),
    "conv": (problem("self.c(x)", "torch.randn(8, 3, 64, 64)", init="        self.c = nn.Conv2d(3, 16, 3)"), ("conv",)),
    "add": (problem("a + b", "torch.randn(1024), torch.randn(1024)", "a, b"), ("elementwise",)),
    "broadcast bias": (problem("x * self.b + 1", "torch.randn(8, 64, 32, 32)",
                               init="        self.b = nn.Parameter(torch.randn(1, 64, 1, 1))"), ("elementwise",)),
    "transposed add": (problem("a.t() + b", "torch.randn(1024, 512), torch.randn(512, 1024)", "a, b"), ("strided",)),
    "transpose copy": (problem("x.transpose(0, 1).contiguous()", "torch.randn(1024, 512)"), ("strided",)),
    # attention's transposed operand is the matmul's: no strided work of its own
    "attention": (problem("torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v",
                          "torch.randn(2, 8, 128, 64), torch.randn(2, 8, 128, 64), torch.randn(2, 8, 128, 64)", "q, k, v"),
                  ("matmul", "row_reduction")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_kinds_from_the_traced_reference(name: str) -> None:
    source, kinds = CASES[name]
    assert problem_kinds(source, f"{name}.py") == kinds


def test_the_repository_problems() -> None:
    assert problem_kinds((ROOT / "tests" / "graphs" / "add_problem.py").read_text()) == ("elementwise",)
    for name, kind in (("softmax", "row_reduction"), ("layernorm", "row_reduction"), ("matmul_gelu", "matmul")):
        path = ROOT / "examples" / name / "problem.py"
        if path.exists():
            assert kind in problem_kinds(path.read_text(), str(path)), name


def test_a_forward_the_meta_device_cannot_run_is_read_from_its_source() -> None:
    # .item() needs data the meta device does not have
    source = problem("torch.softmax(x, dim=-1) * x.sum().item()", "torch.randn(64, 64)")
    assert problem_kinds(source, "item.py") == ("row_reduction",)
    assert source_kinds(problem("a.t() @ b", "torch.randn(8, 8), torch.randn(8, 8)", "a, b")) == ["matmul", "strided"]
    assert source_kinds(problem("torch.relu(x)", "torch.randn(8)")) == ["elementwise"]
    # a variable named t is not a transpose
    assert source_kinds("t = 1\ny = t + 1\n") == ["elementwise"]
    assert source_kinds("def broken(:\n") == []


def test_kinds_of_op_names() -> None:
    assert kinds_of_ops(["addmm", "relu"]) == ["matmul"]
    assert kinds_of_ops(["mul", "add"]) == ["elementwise"]
    assert kinds_of_ops(["convolution", "native_batch_norm"]) == ["conv", "row_reduction"]
    assert kinds_of_ops(["_scaled_dot_product_flash_attention"]) == ["matmul", "row_reduction"]
    assert kinds_of_ops(["add"], strided=True) == ["strided"]
