"""The static pre-filter: each rule fires on a minimal snippet, and honest kernels pass untouched.

No workers, no Triton: `static.check_source` only parses. The adversarial suite
(test_adversarial.py) shows the run-time guards catch the same exploits with this filter switched off.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelwright.evaluators.static import StaticViolation, check_source, ticket_waits

REPO = Path(__file__).resolve().parents[2]

CASES = [
    # imports
    ("import threading", "threading"),
    ("from concurrent.futures import ThreadPoolExecutor", "threading"),
    ("import multiprocessing", "multiprocessing"),
    ("import torch.multiprocessing as mp", "multiprocessing"),
    ("import subprocess", "subprocess"),
    ("import ctypes", "ctypes"),
    ("import gc", "gc"),
    ("import inspect", "inspect"),
    ("import importlib", "importlib"),
    ("import socket", "socket"),
    ("import urllib.request", "socket"),
    ("import os", "os"),
    ("from os import path", "os"),
    ("import sys", "sys"),
    ("import builtins", "builtins"),
    ("import pickle", "serialization"),
    ("import pathlib", "filesystem"),
    ("import time", "time"),
    ("import numpy as np", "host_compute"),
    ("import cupy", "foreign_kernel"),
    ("import torch._dynamo", "torch_internals"),
    ("from torch.utils._python_dispatch import TorchDispatchMode", "torch_internals"),
    ("from torch import _C", "torch_internals"),
    ("import triton.runtime.driver", "triton_internals"),
    ("import requests_oauthlib", "forbidden_import"),
    ("from . import sibling", "forbidden_import"),
    # calls
    ("exec('x = 1')", "exec_eval"),
    ("eval('1')", "exec_eval"),
    ("compile('1', 'f', 'eval')", "exec_eval"),
    ("__import__('os')", "importlib"),
    ("globals()", "introspection"),
    ("vars()", "introspection"),
    ("open('/etc/passwd')", "filesystem"),
    ("import torch\ntorch.save({}, 'f.pt')", "filesystem"),
    ("import torch\ntorch.load('f.pt')", "filesystem"),
    ("import torch\nt = torch.from_file('f', size=4)", "filesystem"),
    ("setattr(object, 'x', 1)", "dynamic_attribute"),
    ("import torch\ngetattr(torch, 'o' + 's')", "os"),  # a name spelled out in pieces is still read
    ("import torch\ndef reach(name):\n    return getattr(torch, name)", "dynamic_attribute"),
    ("import torch\nf = torch.compile(lambda x: x)", "torch_compile"),
    ("from torch import compile", "torch_compile"),
    ("import torch\ntorch.cuda.Stream()", "stream_creation"),
    ("import torch\nwith torch.cuda.stream(s):\n    pass", "stream_creation"),
    # attributes
    ("f.__globals__", "forbidden_attribute"),
    ("f.__code__", "forbidden_attribute"),
    ("getattr(f, '__closure__')", "forbidden_attribute"),
    ("x.__class__.__bases__", "forbidden_attribute"),
    ("e.__traceback__.tb_frame.f_back", "forbidden_attribute"),
    ("import torch\nmods = torch.sys.modules", "sys"),
    ("import torch\ntorch.os.fork()", "os"),
    ("import torch\ntorch.os.environ", "os"),
    ("import torch\ntorch.ctypes.string_at(0)", "ctypes"),
    ("import torch\ntorch.threading.Thread", "threading"),
    ("import torch\ntorch.multiprocessing.Process", "multiprocessing"),
    ("import torch.nn.functional as F\nF.importlib.import_module('os')", "importlib"),
    ("import torch.nn.functional as F\nF.np.asarray", "host_compute"),
    ("import torch\ntorch._C._DisableTorchDispatch()", "torch_internals"),
    ("import torch\ntorch.utils._python_dispatch._get_current_dispatch_mode()", "torch_internals"),
    ("import torch\ntorch.ops.aten._softmax.default", "torch_internals"),
    ("import torch\ntorch.hub.load('a', 'b')", "torch_internals"),
    ("x.numpy()", "host_compute"),
    ("x.tofile('out.bin')", "filesystem"),
    # patching and subclassing
    ("import torch\ntorch.allclose = lambda *a: True", "module_patching"),
    ("import time\ntime.perf_counter = lambda: 0.0", "time"),
    ("import torch.nn.functional as F\nF.softmax = None", "module_patching"),
    ("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True", "module_patching"),
    ("import torch\nclass Lazy(torch.Tensor):\n    pass", "tensor_subclass"),
    ("import torch\nclass P(torch.nn.Parameter):\n    pass", "tensor_subclass"),
    ("import triton.tools.disasm", "forbidden_import"),
    ("class M:\n    def __torch_function__(cls, *a):\n        pass", "tensor_subclass"),
    # programs waiting on one another (the candidate contract): spins on a reading atomic or a volatile load
    ("import triton.language as tl\ndef k(c):\n    while tl.atomic_add(c, 0) < 4:\n        pass", "inter_program_wait"),
    ("import triton.language as tl\ndef k(c):\n    n = 0\n    while n < 4:\n        n = tl.load(c, volatile=True)",
     "inter_program_wait"),
    ("import triton.language as tl\ndef k(c):\n    while tl.atomic_cas(c, 1, 1) != 1:\n        pass", "inter_program_wait"),
    ("import triton.language as tl\ndef k(c, n):\n    while tl.atomic_max(c, 0) < n:\n        tl.debug_barrier()",
     "inter_program_wait"),
]


@pytest.mark.parametrize(("source", "rule"), CASES, ids=[f"{r}:{s.splitlines()[-1][:40]}" for s, r in CASES])
def test_rule_fires(source: str, rule: str) -> None:
    violations = check_source(source)
    assert violations, f"no rule fired on:\n{source}"
    assert violations[0].rule == rule, f"expected {rule}, got {[(v.rule, v.message) for v in violations]}"
    assert violations[0].line >= 1


@pytest.mark.parametrize(("source", "rule"), [
    ("import torch\ns = getattr(torch.cuda, 'Stream')()\n", "stream_creation"),
    ("import torch\nc = getattr(torch, 'compile')\n", "torch_compile"),
    ("import torch\nf = getattr(torch, 'load')\n", "filesystem"),
    ("import torch\nev = torch.cuda.Event\nev.elapsed_time = lambda *a: 1.0\n", "module_patching"),
    ("import time\npc = time\npc.perf_counter = lambda: 0.0\n", "module_patching"),
])
def test_constant_getattr_and_local_aliases_are_seen_through(source: str, rule: str) -> None:
    assert rule in {v.rule for v in check_source(source)}, check_source(source)


# docs/verifier.md item 28: a name the static filter never reads. Strings given to getattr, attrgetter,
# methodcaller, __getattribute__ and namespace lookups are read when the source spells them out (pieces
# joined by +, an f-string, "".join of literals) and judged as the written-out path would be.
INDIRECT = [
    ("import torch\ngetattr(torch, '_' + 'C')", "torch_internals"),
    ("import torch\ngetattr(torch, f'{\"_\"}C')", "torch_internals"),
    ("import torch\ngetattr(torch, ''.join(['_', 'C']))", "torch_internals"),
    ("import torch\ngetattr(getattr(torch, 'utils'), '_python' + '_dispatch')", "torch_internals"),
    ("import torch\ngetattr(torch, '_C')._DisableTorchDispatch()", "torch_internals"),
    ("import torch\nC = getattr(torch, '_C')\nC._DisableTorchDispatch()", "torch_internals"),
    ("import torch\nimport operator\noperator.attrgetter('_C._Disable' + 'TorchDispatch')(torch)", "torch_internals"),
    ("import torch\nfrom operator import attrgetter\nget = attrgetter('_C')\nget(torch)", "torch_internals"),
    ("import torch\nimport operator\noperator.methodcaller('_dispatch' + '_call_boxed')(torch._C)", "torch_internals"),
    ("import torch\nobject.__getattribute__(torch, '_C')", "torch_internals"),
    ("import torch\nvars(torch)['_C']", "torch_internals"),
    ("import torch\ntorch.__dict__['_C']", "torch_internals"),
    ("import torch\ntorch.__dict__.get('_' + 'C')", "torch_internals"),
    ("import torch\ngetattr(torch, 'comp' + 'ile')", "torch_compile"),
    ("import torch\ngetattr(torch, 'lo' + 'ad')", "filesystem"),
    ("import torch\ncuda = getattr(torch, 'cuda')\ncuda.Stream()", "stream_creation"),
    ("import torch.nn.functional as F\nimport operator\noperator.attrgetter('np')(F)", "host_compute"),
    ("import operator\noperator.attrgetter('__glo' + 'bals__')", "forbidden_attribute"),
    ("import operator\noperator.attrgetter('nn.functional.os')", "os"),
    ("import operator\noperator.methodcaller('num' + 'py')", "host_compute"),
    ("import operator\ndef reach(name):\n    return operator.attrgetter(name)", "dynamic_attribute"),
    ("import functools, torch\nfunctools.partial(getattr, torch, '_C')", "dynamic_attribute"),
    ("import functools, torch\ntorch.no_grad()(functools.partial(open, 'answer.pt'))()", "filesystem"),
    ("import torch\nx = torch.empty(1)\nx.__getattribute__('num' + 'py')()", "host_compute"),
]


@pytest.mark.parametrize(("source", "rule"), INDIRECT, ids=[f"{r}:{s.splitlines()[-1][:48]}" for s, r in INDIRECT])
def test_names_in_strings_are_read(source: str, rule: str) -> None:
    rules = [v.rule for v in check_source(source)]
    assert rule in rules, f"{rule} did not fire on:\n{source}\n(got {rules})"


@pytest.mark.parametrize("source", [
    "import torch\nclass M(torch.nn.Module):\n    def forward(self, input):\n        return getattr(self, 'w' + 'eight') * input\n",
    "import operator\nimport torch\nx = torch.empty(2)\nrows = operator.attrgetter('shape')(x)[0]\n",
    "import triton.language as tl\nkind = getattr(tl, 'float' + '32')\n",
    "import torch\ndt = getattr(torch, ''.join(['float', '32']))\n",
    "import operator\nkey = operator.itemgetter(1)\nby = operator.methodcaller('item')\n",
    "import torch\ndef forward(input, compile=False):\n    return [input, compile]\n",
])
def test_innocent_string_reads_pass(source: str) -> None:
    assert check_source(source) == [], [v.sentence() for v in check_source(source)]


def test_a_name_rebound_to_a_plain_value_is_no_alias() -> None:
    src = "import torch\nx = torch.float32\nx = SimpleBox()\nx.value = 3\n"
    assert check_source(src) == []


def test_module_patching_of_an_alias() -> None:
    rules = {v.rule for v in check_source("import triton.language as tl\ntl.dot = None")}
    assert "module_patching" in rules


def test_streams_allowed_when_the_problem_allows_them() -> None:
    src = "import torch\ns = torch.cuda.Stream()\n"
    assert [v.rule for v in check_source(src)] == ["stream_creation"]
    assert check_source(src, allow_streams=True) == []


def test_sentence_names_line_and_rule() -> None:
    (v,) = check_source("x = 1\nimport gc\n")
    assert isinstance(v, StaticViolation)
    assert v.sentence() == "line 2: imports 'gc', which candidates may not use (rule gc)"


def test_violations_in_source_order() -> None:
    lines = [v.line for v in check_source("import os\nimport sys\nexec('1')\n")]
    assert lines == sorted(lines) == [1, 2, 3]


def test_syntax_error_raises() -> None:
    with pytest.raises(SyntaxError):
        check_source("def f(:\n")


OK_SNIPPETS = [
    "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport triton\n"
    "import triton.language as tl\nfrom triton.language.extra import libdevice\n",
    "import torch\nx = torch.empty(4)\ny = x.view(2, 2).t().contiguous()\nz = x.new_empty(3)\n",
    "import torch\ntorch.ops.aten.softmax.int\n",  # public aten names are left to the run-time op record
    "import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        self.cache = x\n        return x\n",
    "import triton\nimport triton.language as tl\n@triton.autotune(configs=[triton.Config({'B': 64})], key=['n'])\n"
    "@triton.jit\ndef k(x, n, B: tl.constexpr):\n    tl.store(x + tl.arange(0, B), tl.zeros([B], tl.float32))\n",
    "from collections import namedtuple\nfrom dataclasses import dataclass\nimport functools, itertools, operator\n",
    "x = [1, 2]\nprint(len(x), x.__len__())\n",
    # a host-side TMA descriptor (a plain dataclass over a tensor) may be built; the rest of triton.tools may not
    "from triton.tools.tensor_descriptor import TensorDescriptor\n",
    # a lock its holder releases and a work counter are not waits on other programs' results
    "import triton.language as tl\ndef k(lock):\n    while tl.atomic_cas(lock, 0, 1) == 1:\n        pass\n"
    "    tl.atomic_xchg(lock, 0)\n",
    "import triton.language as tl\ndef k(c, n):\n    t = tl.atomic_add(c, 1)\n    while t < n:\n        t = tl.atomic_add(c, 1)\n",
    "import triton.language as tl\ndef k(p, n):\n    i = 0\n    while i < n:\n        x = tl.load(p + i)\n        i += 1\n",
]


@pytest.mark.parametrize("source", OK_SNIPPETS)
def test_innocent_code_passes(source: str) -> None:
    assert check_source(source) == []


HONEST_FILES = sorted(
    [*(REPO / "tests" / "kernels" / "honest").glob("*_candidate.py"), *(REPO / "examples").glob("*/seed.py"),
     *(REPO / "tests" / "adversarial" / "candidates").glob("honest_*.py")]
)


@pytest.mark.parametrize("path", HONEST_FILES, ids=[f"{p.parent.name}/{p.name}" for p in HONEST_FILES])
def test_honest_kernels_pass(path: Path) -> None:
    violations = check_source(path.read_text())
    assert violations == [], [v.sentence() for v in violations]


# A spin loop in a kernel that claims its work with a ticket is left to the ordering check (docs/contract.md,
# "When programs may wait on one another"); without a ticket in the same function it is a violation.
TICKET_WAIT = ("import triton.language as tl\ndef k(c, f):\n    t = tl.atomic_add(c, 1)\n"
               "    while tl.atomic_add(f + t - 1, 0) == 0:\n        pass\n")


def test_a_spin_loop_in_a_kernel_that_takes_a_ticket_goes_to_the_ordering_check() -> None:
    assert check_source(TICKET_WAIT) == []
    assert ticket_waits(TICKET_WAIT) == [4]


@pytest.mark.parametrize("source", [
    # the ticket is taken in another function: each kernel is judged on its own
    "import triton.language as tl\ndef claim(c):\n    t = tl.atomic_add(c, 1)\n    return t\n"
    "def k(f, t):\n    while tl.atomic_add(f + t - 1, 0) == 0:\n        pass\n",
    # an atomic add of 2 (or of a variable) is no ticket
    "import triton.language as tl\ndef k(c, f):\n    t = tl.atomic_add(c, 2)\n"
    "    while tl.load(f + t, volatile=True) == 0:\n        pass\n",
    # a ticket taken only inside a nested function does not cover the outer one
    "import triton.language as tl\ndef k(c, f):\n    def inner(c):\n        t = tl.atomic_add(c, 1)\n"
    "    while tl.atomic_max(f, 0) < 3:\n        pass\n",
])
def test_a_spin_loop_without_a_ticket_of_its_own_is_still_refused(source: str) -> None:
    assert [v.rule for v in check_source(source)] == ["inter_program_wait"]
    assert ticket_waits(source) == []


def test_the_kernels_that_wait_are_named_and_twins_found() -> None:
    from kernelwright.evaluators.static import waiting_kernels

    two = TICKET_WAIT + "def j(c):\n    return c\n"
    assert waiting_kernels(two) == (["k"], [])
    twin = TICKET_WAIT + "class A:\n    def k(self):\n        return 0\n"
    assert waiting_kernels(twin) == (["k"], ["k"])
