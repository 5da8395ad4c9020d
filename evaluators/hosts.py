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
import pickle
import resource
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from multiprocessing.managers import BaseManager
from typing import Any, Callable

from .cluster import CALL_TIMEOUT_S, MAX_CONCURRENCY, RETRIES, ClusterError, EvalActor, Lost, Slot, SlotLost, first_line, version
from . import reaper
from .pool import SECRETISH, sweep_orphans

log = logging.getLogger(__name__)

START_TIMEOUT_S = 300.0
"""how long a new host may take to start: import torch, set up its device and answer"""
CLOSE_TIMEOUT_S = 60.0
"""how long closing a host (its evaluator's workers) may take before it is killed instead"""


class _Manager(BaseManager):
    """The driver's side: a proxy to the host's one `EvalActor`."""


_Manager.register("actor")


@dataclass
class Host:
    """A running host process, as the driver holds it."""

    proc: subprocess.Popen[bytes]
    folder: str
    proxy: Any
    hello: dict[str, Any] = field(default_factory=dict)
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
        # the host had adopted what its candidates left behind (it is a subreaper); killed, it hands them to the
        # driver, a subreaper too since it started a host (`LocalSlot._start`), whose sweep kills them
        sweep_orphans()
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
                 start_timeout_s: float = START_TIMEOUT_S, close_timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        super().__init__(None, "cpu" if device == "cpu" else "cuda", name or device, retries=retries,
                         call_timeout_s=call_timeout_s, placement_timeout_s=start_timeout_s)
        self.device = device
        self.close_timeout_s = close_timeout_s
        # Every call to a host waits in the calling thread for an answer with a deadline (`_wait`); the call
        # itself runs here, so a host that cannot be killed (stuck in a driver) never holds up a run's thread.
        self._calls = ThreadPoolExecutor(max_workers=MAX_CONCURRENCY, thread_name_prefix=f"kw-host-{device}")

    def _where(self) -> str:
        return f"the {self.device} host process (pid {self.hello.get('pid')})"

    def _start(self) -> Host:
        reaper.become_subreaper()  # a host killed mid-evaluation hands its adopted orphans here, not to init
        folder = tempfile.mkdtemp(prefix="kw-host-")  # 0700: the socket is reachable by this user only
        address = os.path.join(folder, "s")
        key = secrets.token_bytes(32)
        with open(os.path.join(folder, "stderr.log"), "wb") as err:  # what it says lands there, not on the terminal
            # -P and its own folder as working directory: nothing of the driver's current directory shadows an
            # installed package in it. Its own session: the terminal's Ctrl-C is the driver's to handle.
            proc = subprocess.Popen([sys.executable, "-P", "-m", "kernelwright.evaluators.hosts"], env=host_env(),
                                    cwd=folder, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                    close_fds=True, start_new_session=True)
        host = Host(proc, folder, None)
        assert proc.stdin is not None and proc.stdout is not None
        deadline = time.monotonic() + self.placement_timeout_s
        try:
            proc.stdin.write((json.dumps({"address": address, "key": key.hex(), "device": self.device,
                                          "kind": self.kind}) + "\n").encode())
            proc.stdin.flush()
            line = _read_line(proc, self.placement_timeout_s)
            if line != "ready":
                raise SlotLost(f"a {self.device} host process did not start: {line}{host.last_words()}")

            def connect() -> tuple[Any, dict[str, Any]]:
                manager = _Manager(address=address, authkey=key)
                manager.connect()
                proxy = manager.actor()  # type: ignore[attr-defined]
                return proxy, _unwrap(proxy.call("hello", ()))

            host.proxy, host.hello = self._wait(host, connect, deadline - time.monotonic(), "start")
        except SlotLost:
            host.kill()
            raise
        except Exception as e:  # noqa: BLE001 - any failure to start is a lost host
            host.kill()
            raise SlotLost(f"a {self.device} host process failed to start: {first_line(e)}{host.last_words()}") from None
        if host.hello.get("kernelwright") != version():
            host.kill()
            self._fatal = ClusterError(f"the {self.device} host process runs kernelwright "
                                       f"{host.hello.get('kernelwright')} and this driver {version()}")
            raise self._fatal
        self.hello = host.hello
        return host

    def _wait(self, host: Host, fn: Callable[[], Any], timeout: float, what: str) -> Any:
        """`fn()` (a call to `host`), answered within `timeout` s, or Lost (the host is killed, in the
        background: a kill that cannot land must not hold the caller). Lost too when the host is gone."""
        future = self._calls.submit(fn)
        try:
            return future.result(timeout=max(timeout, 0.0))
        except FutureTimeout:
            host.hung.set()
            threading.Thread(target=host.kill, daemon=True, name="kw-host-kill").start()
            raise Lost(f"{self._named(host)} gave no answer within {timeout:g} s ({what})") from None
        except (EOFError, OSError) as e:  # anything the connection raises: the method's own come back as values
            if host.hung.is_set():
                raise Lost(f"{self._named(host)} gave no answer in time ({what})") from None
            code = host.proc.poll()
            raise Lost(f"{self._named(host)} was lost ({first_line(e)}"
                       f"{f'; exit status {code}' if code is not None else ''}){host.last_words()}") from None

    def _named(self, host: Host) -> str:
        return f"the {self.device} host process (pid {host.proc.pid})"

    def _invoke(self, actor: Any, method: str, args: tuple[Any, ...]) -> Any:
        host: Host = actor
        return _unwrap(self._wait(host, lambda: host.proxy.call(method, args), self.call_timeout_s, method))

    def _close_actor(self, actor: Any) -> None:
        host: Host = actor
        try:
            self._wait(host, lambda: host.proxy.call("close", ()), self.close_timeout_s, "close")
        except Exception:  # noqa: BLE001 - it is killed next either way
            pass

    def _kill(self, actor: Any) -> None:
        actor.kill()

    def close(self) -> None:
        super().close()
        self._calls.shutdown(wait=False)


def _unwrap(answer: tuple[str, Any]) -> Any:
    """A host's answer: its method's value, or the exception the method raised, raised here."""
    kind, value = answer
    if kind == "raise":
        raise value
    return value


class Hosted:
    """What a host serves: `EvalActor`'s methods by name, each answer ("ok", value) or ("raise", exception),
    so that whatever the connection itself raises in the driver is about the connection."""

    def __init__(self, actor: EvalActor) -> None:
        self.actor = actor

    def call(self, method: str, args: tuple[Any, ...]) -> tuple[str, Any]:
        if method not in ("hello", "evaluate", "device_facts", "profile", "close"):
            return "raise", ValueError(f"no method {method!r}")
        try:
            return "ok", getattr(self.actor, method)(*args)
        except Exception as e:  # noqa: BLE001 - handed back to the caller
            try:
                pickle.dumps(e)
            except Exception:  # noqa: BLE001 - one that cannot travel goes as its first line
                return "raise", RuntimeError(first_line(e))
            return "raise", e


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
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when a run stops, not a stray Ctrl-C
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core files in anyone's directory
    spec = json.loads(sys.stdin.buffer.readline())
    folder = os.path.dirname(spec["address"])
    hosted = Hosted(EvalActor(spec["kind"], device=spec["device"], tag="host"))

    class Serving(BaseManager):
        pass

    Serving.register("actor", callable=lambda: hosted)
    server = Serving(address=spec["address"], authkey=bytes.fromhex(spec["key"])).get_server()

    def end_with_the_driver() -> None:
        while sys.stdin.buffer.read(65536):
            pass
        shutil.rmtree(folder, ignore_errors=True)  # the driver may be gone: the socket's folder is ours to remove
        threading.Timer(20.0, os._exit, args=(0,)).start()  # a close that hangs does not keep the host alive
        try:
            hosted.actor.close()
        finally:
            os._exit(0)

    threading.Thread(target=end_with_the_driver, daemon=True, name="kernelwright-host-stdin").start()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nobody reads the pipe from now on: a full one would block us
    server.serve_forever()


if __name__ == "__main__":
    _serve()
