"""Device hosts: one process of this machine per device, each holding that device's evaluator.

With several GPUs in one process, every device's judging (the reference's trials, comparing outputs, reading
the workers' replies) competes for one interpreter lock and one CUDA driver: on two H100s, a run with
`--device cuda:0,cuda:1` judged 16% slower per candidate than the same run through Ray, which gives each GPU
a process of its own. A device host gives each device that process without Ray. It is the Ray actor's
evaluation service (`cluster.EvalActor`), started with `python -m kernelwright.evaluators.hosts` and served
over a Unix socket by `multiprocessing.managers` (one thread per connection, so a run's branches on one
device are judged at once, as in one process; the GPU locks are files, so they keep measurements apart
across processes as they do within one).

What the driver sees is a `cluster.Slot` (`LocalSlot`): a host that dies or hangs is replaced and the call
made again, and when that fails too the verdict is `error`, which a run never caches.

Secrets: the host is started with the driver's environment less every secret-looking variable, so no key
ever reaches it (or the candidates it starts, which get their own allow-list besides). The socket's
directory is the driver's alone (0700), and the socket answers only to the key the driver gave the host on
its stdin. A host ends when the driver does: it exits when its stdin (a pipe from the driver) closes.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.managers import BaseManager, RemoteError
from typing import Any

from .cluster import CALL_TIMEOUT_S, RETRIES, EvalActor, Lost, Slot, SlotLost, first_line
from .pool import SECRETISH

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0
"""how long a new host may take to import torch and listen"""


class _Manager(BaseManager):
    """The driver's side: a proxy to the host's one `EvalActor`."""


_Manager.register("actor")


@dataclass
class Host:
    """A running host process, as the driver holds it."""

    proc: subprocess.Popen[bytes]
    folder: str
    proxy: Any
    hung: threading.Event = field(default_factory=threading.Event)

    def last_words(self) -> str:
        """The last line the host wrote to its stderr, for a message about its end ("" if none)."""
        try:
            with open(os.path.join(self.folder, "stderr.log"), "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
                lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return f" (its last words: {lines[-1][:300]})" if lines else ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def host_env() -> dict[str, str]:
    """The driver's environment less anything secret-looking (the names `pool.SECRETISH` matches)."""
    return {k: v for k, v in os.environ.items() if not SECRETISH.search(k)}


class LocalSlot(Slot):
    """One device of this machine, judged in a host process of its own that is replaced when lost."""

    label = "the device host process"
    versions_key = "host_slot"

    def __init__(self, device: str, name: str = "", *, retries: int = RETRIES, call_timeout_s: float = CALL_TIMEOUT_S,
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        super().__init__(None, "cpu" if device == "cpu" else "cuda", name or device, retries=retries,
                         call_timeout_s=call_timeout_s, placement_timeout_s=start_timeout_s)
        self.device = device

    def _where(self) -> str:
        return f"the {self.device} host process (pid {self.hello.get('pid')})"

    def _start(self) -> Host:
        folder = tempfile.mkdtemp(prefix="kw-host-")  # 0700: the socket is reachable by this user only
        address = os.path.join(folder, "s")
        key = secrets.token_bytes(32)
        with open(os.path.join(folder, "stderr.log"), "wb") as err:  # what it says lands there, not on the terminal
            proc = subprocess.Popen([sys.executable, "-m", "kernelwright.evaluators.hosts"], env=host_env(),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, close_fds=True)
        host = Host(proc, folder, None)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write((json.dumps({"address": address, "key": key.hex(), "device": self.device,
                                          "kind": self.kind}) + "\n").encode())
            proc.stdin.flush()
            line = _read_line(proc, self.placement_timeout_s)
            if line != "ready":
                raise SlotLost(f"a {self.device} host process did not start: {line}{host.last_words()}")
            manager = _Manager(address=address, authkey=key)
            manager.connect()
            host.proxy = manager.actor()  # type: ignore[attr-defined]
            self.hello = host.proxy.hello()
        except SlotLost:
            host.kill()
            raise
        except Exception as e:  # noqa: BLE001 - any failure to start is a lost host
            host.kill()
            raise SlotLost(f"a {self.device} host process failed to start: {first_line(e)}") from None
        return host

    def _invoke(self, actor: Any, method: str, args: tuple[Any, ...]) -> Any:
        host: Host = actor
        timer = threading.Timer(self.call_timeout_s, self._hang_up, args=(host,))
        timer.daemon = True
        timer.start()
        try:
            return getattr(host.proxy, method)(*args)
        except RemoteError as e:  # the method's own exception, which could not come back as itself
            raise RuntimeError(first_line(e)) from None
        except (EOFError, ConnectionError, OSError) as e:
            if host.hung.is_set():
                raise Lost(f"{self._where()} gave no answer within {self.call_timeout_s:g} s") from None
            if isinstance(e, (EOFError, ConnectionError)) or host.proc.poll() is not None:
                code = host.proc.poll()
                raise Lost(f"{self._where()} was lost ({first_line(e)}"
                           f"{f'; exit status {code}' if code is not None else ''}){host.last_words()}") from None
            raise  # the method's own OSError
        finally:
            timer.cancel()

    def _hang_up(self, host: Host) -> None:
        host.hung.set()
        host.kill()

    def _close_actor(self, actor: Any) -> None:
        host: Host = actor
        try:
            host.proxy.close()
        except Exception:  # noqa: BLE001 - it is killed next either way
            pass

    def _kill(self, actor: Any) -> None:
        actor.kill()


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    """The host's first line on stdout, within `timeout` seconds."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buf = b""
    fd = proc.stdout.fileno()
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            return f"no answer within {timeout:g} s"
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                return f"it exited with status {proc.wait()}"
            buf += chunk
    return buf.split(b"\n", 1)[0].decode(errors="replace").strip()


# -- the host process -------------------------------------------------------------------------------------


def _serve() -> None:
    spec = json.loads(sys.stdin.buffer.readline())
    actor = EvalActor(spec["kind"], device=spec["device"], tag="host")

    class Serving(BaseManager):
        pass

    Serving.register("actor", callable=lambda: actor)
    server = Serving(address=spec["address"], authkey=bytes.fromhex(spec["key"])).get_server()

    def end_with_the_driver() -> None:
        while sys.stdin.buffer.read(65536):
            pass
        threading.Timer(20.0, os._exit, args=(0,)).start()  # a close that hangs does not keep the host alive
        try:
            actor.close()
        finally:
            os._exit(0)

    threading.Thread(target=end_with_the_driver, daemon=True, name="kernelwright-host-stdin").start()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nobody reads the pipe from now on: a full one would block us
    server.serve_forever()


if __name__ == "__main__":
    _serve()
