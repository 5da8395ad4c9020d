"""Class 26: a candidate that opens a socket. Landlock does not govern connecting to a pathname Unix socket
(a Ray node's raylet, Docker's socket, an ssh agent listen on such sockets), nor TCP before its ABI 4; the
sandbox's seccomp filter refuses the worker any new Unix or IP socket. The test listens on both kinds itself,
and the candidate, with the static filter off, tries to reach them from `forward` and says what it got."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from kernelwright.evaluators import EvalPolicy, Evaluator, load_problem

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "adversarial" / "problems" / "relu.py"
CANDIDATE = '''
import torch
import torch.nn as nn

S = torch.sys.modules["socket"]  # the worker's own, past the import guard (which refuses `import socket`)


def reach(family, address):
    s = S
    try:
        c = s.socket(family, s.SOCK_STREAM)
        c.settimeout(2)
        c.connect(address)
        c.sendall(b"hello from the candidate")
        return "connected"
    except OSError as e:
        return type(e).__name__


class ModelNew(nn.Module):
    def forward(self, x):
        raise RuntimeError(f"NET unix={reach(S.AF_UNIX, UNIX_PATH)} tcp={reach(S.AF_INET, ('127.0.0.1', TCP_PORT))}.")
'''


def test_a_candidate_reaches_no_unix_or_tcp_socket(tmp_path: Path, test_device: str) -> None:
    unix_path = str(tmp_path / "service.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    unix.listen()
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    source = f"UNIX_PATH = {unix_path!r}\nTCP_PORT = {tcp.getsockname()[1]}\n" + CANDIDATE
    try:
        with Evaluator(load_problem(PROBLEM), test_device, EvalPolicy(trials=1, static_check=False, spares=0)) as ev:
            result = ev.evaluate(source)
        got = re.search(r"NET unix=(\w+) tcp=(\w+)\.", result.detail)
        assert got is not None, f"the candidate did not run as intended: {result.verdict} {result.detail[:500]}"
        sandbox = next((c.detail for c in result.checks if c.name == "sandbox"), "")
        if "no new sockets" not in sandbox:
            pytest.skip(f"no seccomp filter on this machine: {sandbox}")
        assert got.groups() == ("PermissionError",) * 2, got.group(0)
        for listener in (unix, tcp):  # and nothing knocked
            listener.setblocking(False)
            with pytest.raises(BlockingIOError):
                listener.accept()
    finally:
        unix.close()
        tcp.close()


I386_SOCKET = '''
import ctypes, mmap, sys
from kernelwright.evaluators import sandbox

# i386's socket(AF_UNIX, SOCK_STREAM, 0) through `int 0x80`: system call 359 of the 32-bit table, which a 64-bit
# process can reach where the kernel emulates IA-32, and which a filter written for the 64-bit numbers misses
code = bytes([0x53, 0xB8, 0x67, 0x01, 0, 0, 0xBB, 1, 0, 0, 0, 0xB9, 1, 0, 0, 0, 0x31, 0xD2, 0xCD, 0x80, 0x5B, 0xC3])
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
call = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
before = call()
said = sandbox.no_sockets()
print(before, call(), said)
'''


def test_the_32_bit_system_call_table_opens_no_socket_either() -> None:
    """Class 26 by another door: on x86_64 with IA-32 emulation, `int 0x80` enters i386's system call table, where
    socket() has another number (359, or socketcall 102); the filter refuses every call of another architecture's
    table (a reviewer's finding: it allowed them)."""
    import platform
    import subprocess
    import sys

    if platform.machine() != "x86_64":
        pytest.skip("the i386 table is x86_64's")
    out = subprocess.run([sys.executable, "-c", I386_SOCKET], capture_output=True, text=True, timeout=60,
                         cwd=ROOT.parent.parent)
    assert out.returncode == 0, out.stderr[-1500:]
    before, after, said = out.stdout.split(maxsplit=2)
    if int(before) < 0:
        pytest.skip(f"no IA-32 emulation here (the 32-bit socket() gave {before} before any filter)")
    if not said.startswith("no new sockets"):
        pytest.skip(f"no seccomp filter on this machine: {said.strip()}")
    assert int(after) == -13, f"a 32-bit socket() got fd {after} past the filter (EACCES expected)"
