"""Private torch APIs are used through evaluators/torch_private.py only (issue 25): every other source module is
parsed and any import of a private torch module or name, and any `torch....._name` attribute, is reported. The
checker is tried on sources that break the rule, so this test can fail."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from kernelwright.evaluators import torch_private

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("evaluators", "tools", "agents", "graphs", "kernelwright")
HOME = Path("evaluators/torch_private.py")


def _private(parts: list[str]) -> bool:
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts)


def _chain(node: ast.AST) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


def private_uses(source: str) -> list[str]:
    """Each private torch API a module's source reaches: `import torch._x`, `from torch.y import _z`,
    `torch.a._b` (the innermost private link of an attribute chain, once)."""
    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Import):
            found += [a.name for a in n.names if a.name.split(".")[0] == "torch" and _private(a.name.split("."))]
        elif isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "torch":
            if _private(n.module.split(".")) or any(_private([a.name]) for a in n.names):
                found.append(n.module)
        elif isinstance(n, ast.Attribute):
            c = _chain(n)
            if c and c[0] == "torch" and _private(c[1:]) and not _private(c[1:-1]):
                found.append(".".join(c))
    return found


@pytest.mark.parametrize("source", [
    "import torch._ops\n",
    "from torch.utils._python_dispatch import TorchDispatchMode\n",
    "from torch.cuda import _sleep\n",
    "import torch\nspin = torch.cuda._sleep\n",
    "import torch\nn = torch._C._len_torch_dispatch_stack()\n",
])
def test_the_checker_sees_a_private_torch_api(source: str) -> None:
    assert private_uses(source)


def test_the_checker_lets_public_torch_and_our_own_private_names_pass() -> None:
    assert private_uses("import torch\nimport torch.utils.flop_counter\nfrom .x import _y\nself._spin = 1\n"
                        "t = torch.cuda.Event.record\nname = 'torch.utils._python_dispatch'\n") == []


def test_only_torch_private_uses_private_torch_apis() -> None:
    offenders = []
    for folder in FOLDERS:
        for f in sorted((ROOT / folder).rglob("*.py")):
            rel = f.relative_to(ROOT)
            if rel != HOME:
                offenders += [f"{rel}: {use}" for use in private_uses(f.read_text())]
    assert offenders == [], "private torch APIs outside evaluators/torch_private.py:\n" + "\n".join(offenders)
    assert private_uses((ROOT / HOME).read_text())  # where they are


def test_an_untested_torch_is_named_in_one_sentence() -> None:
    assert torch_private.untested("2.11.0+cu130") is None and torch_private.untested("2.13.0") is None
    words = torch_private.untested("2.15.1")
    assert words and words.startswith("torch 2.15.1 is not a version kernelwright is tested with (2.11 and 2.13)")
    assert torch_private.untested() is None, f"this machine's torch {torch.__version__} should be a tested one"
