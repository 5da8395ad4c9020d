"""Evaluation on a Ray cluster: one actor per GPU (or per CPU slot), on any node of the cluster.

The graph and every model call stay in the driver. An actor is an ordinary evaluation service on its node:
it holds an `Evaluator` (sandboxed candidate processes, GPU locks, timing) for the problem it was last
given, on the one GPU Ray assigned it (`num_gpus=1`, so Ray's accounting keeps two actors off one GPU).
What comes back is an `EvalResult`, never a hang:

- an actor that dies or whose node is lost mid-call (`RayActorError`, a lost object) is replaced by a
  fresh actor, which Ray places on any free GPU, and the call is made again, at most `retries` times;
- a call with no answer within `call_timeout_s` kills its actor, then the same;
- when the retries are spent, `evaluate` returns verdict `error` (`evaluator_error`: the judge could not
  judge), which a run never caches, so the kernel is judged again later.

Secrets: nothing of the driver's environment is sent (no `runtime_env`), and this module never starts a
cluster (a cluster started by the driver would inherit its environment, keys and all): it only connects to
one that is running. An actor also removes any secret-looking variable its node's environment gave it
before it does anything else, and says which names it removed; candidate processes get the same
allow-listed environment they get anywhere (`pool.scrubbed_env`).

`ray` is an optional dependency (`pip install kernelwright[ray]`); it is imported only here, and only when
a cluster is asked for. The connection is the process's (Ray allows one per process); everything else
(actors, their problems) belongs to whoever holds the `Slot`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from .evaluator import EvalPolicy
from .facts import DeviceFacts, cpu_facts
from .pool import SECRETISH
from .problem import Problem
from .profiling import Profile
from .result import EvalResult, Reason

log = logging.getLogger(__name__)

PLACEMENT_TIMEOUT_S = 300.0
"""how long a new actor may wait for a free GPU (and start) before the slot gives up"""
CALL_TIMEOUT_S = 3600.0
"""no single evaluation takes this long (the evaluator's own per-phase limits end a candidate far sooner);
past it, the actor is presumed hung and replaced"""
RETRIES = 2
"""fresh actors tried after the first one is lost, for one call"""
MAX_CONCURRENCY = 64
"""calls one actor runs at once (threads): at least the branches a run can give one actor, so that no call
waits in the actor's queue while its timeout runs"""


class ClusterError(Exception):
    """The cluster cannot be used (Ray missing, nothing running at the address, no GPU in it); one sentence."""


class SlotLost(Exception):
    """Every actor tried for one call was lost; the message says how."""


class Unplaceable(SlotLost):
    """No node of the cluster took a new actor within the placement timeout: the cluster has no room for this
    slot now (a node lost and none in its place), which another slot's actor may make up for."""


class Lost(Exception):
    """One actor (or device host) is gone or gave no answer in time; the message says how. `Slot.call` replaces
    it and tries again."""


def address_of(cluster: str) -> str:
    """The address `ray.init` takes for `--cluster`: `ray` (the cluster this machine belongs to: RAY_ADDRESS,
    or the one `ray start` started here), `ray://HOST:PORT` (Ray Client, a remote cluster) or `HOST:PORT`
    (a cluster's GCS address, from a machine of the cluster's network)."""
    c = cluster.strip()
    if c in ("ray", "auto"):
        return "auto"
    if c.startswith("ray://") or (":" in c and c.rsplit(":", 1)[1].isdigit()):
        return c
    raise ClusterError(f"--cluster {cluster!r}: use ray (the running cluster), ray://HOST:PORT or HOST:PORT")


def _reachable(address: str, timeout: float = 5.0) -> None:
    """Fail in seconds, not minutes (Ray retries a dead address for a long time), when nothing listens."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            pass
    except (OSError, ValueError) as e:
        raise ClusterError(f"no Ray cluster answers at {address} ({e.__class__.__name__}: {e}); start one with "
                           "`ray start --head` or check the address") from None


_connect_lock = threading.Lock()
_connected: str | None = None


CLIENT_TRIES = 3
"""attempts at a Ray client connection (ray://) whose server failed to set up this client's session"""


def _init(ray: Any, address: str) -> None:
    """`ray.init`, tried again (after 2 s, then 4 s) where a Ray client server answers "Initialization failure":
    it starts a process per client and, on a loaded head node, that start can miss the server's own deadline (seen
    once in the CPU suite, with every core busy); anything else is not tried again."""
    for attempt in range(CLIENT_TRIES):
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR,
                     namespace="kernelwright", ignore_reinit_error=True)
            return
        except ConnectionError as e:
            if not address.startswith("ray://") or "Initialization failure" not in str(e) \
                    or attempt == CLIENT_TRIES - 1:
                raise
            log.warning("the Ray client server at %s could not set up a session (%s); trying again", address,
                        first_line(e))
            try:
                ray.shutdown()
            except Exception:  # noqa: BLE001 - nothing was set up
                pass
            time.sleep(2.0 * 2 ** attempt)


def connect(cluster: str) -> Cluster:
    """The process's connection to the cluster named by `--cluster` (made once; Ray allows one per process)."""
    global _connected
    address = address_of(cluster)
    try:
        import ray
    except ImportError:
        raise ClusterError("--cluster needs Ray, which is not installed: pip install 'kernelwright[ray]'") from None
    with _connect_lock:
        if ray.is_initialized():
            if _connected is not None and _connected != address:
                raise ClusterError(f"this process is already connected to the Ray cluster at {_connected}; "
                                   f"one process can use one cluster, not also {address}")
        else:
            _reachable(address)
            try:
                _init(ray, address)
            except Exception as e:  # noqa: BLE001 - Ray raises several kinds here; each becomes one sentence
                # a cluster with token authentication (`ray start` turns it on when it finds ~/.ray/auth_token)
                # answers a driver without the token like this; guessing token mode would break every other
                hint = "" if os.environ.get("RAY_AUTH_MODE") else \
                    "; if it uses token authentication, set RAY_AUTH_MODE=token and give its token"
                raise ClusterError(f"cannot connect to the Ray cluster at {cluster}: "
                                   f"{first_line(e)}{hint}") from None
            _connected = address
    return Cluster(cluster.strip())


def settle(cluster: str, device: str | None, actors: int | None) -> tuple[Cluster, str, int]:
    """Connect, then settle the actors' kind (cuda, or cpu when asked for or when the cluster has no GPU) and
    number (default: `default_actors`); ClusterError, one sentence, when the cluster cannot hold them."""
    kind = (device or "").strip().lower()
    if kind not in ("", "cpu", "cuda", "gpu"):
        raise ClusterError(f"--device {device} with --cluster: give cuda (one GPU per actor) or cpu; Ray places "
                           "the actors")
    c = connect(cluster)
    kind = "cpu" if kind == "cpu" or (not kind and c.gpus() == 0) else "cuda"
    n = actors or c.default_actors(kind)
    c.check(kind, n)
    return c, kind, n


@dataclass
class Cluster:
    """What the driver needs of a connected cluster."""

    address: str
    """as the user gave it (`--cluster`)"""

    def resources(self) -> dict[str, float]:
        import ray

        return dict(ray.cluster_resources())

    def gpus(self) -> int:
        return int(self.resources().get("GPU", 0))

    def cpus(self) -> int:
        return int(self.resources().get("CPU", 0))

    def check(self, kind: str, actors: int) -> None:
        """ClusterError unless the cluster can hold `actors` actors of `kind` at once."""
        if kind == "cuda":
            have = self.gpus()
            if have == 0:
                raise ClusterError(f"the Ray cluster at {self.address} has no GPU; use --device cpu for the "
                                   "Triton interpreter, or add GPU nodes")
            if actors > have:
                raise ClusterError(f"--actors {actors}: the Ray cluster at {self.address} has {have} GPU(s)")
        elif actors > self.cpus():
            raise ClusterError(f"--actors {actors}: the Ray cluster at {self.address} has {self.cpus()} CPU(s)")

    def default_actors(self, kind: str) -> int:
        """One actor per GPU of the cluster; on the CPU, one per two CPUs (at most 4)."""
        return self.gpus() if kind == "cuda" else max(1, min(4, self.cpus() // 2))

    def slot(self, kind: str, name: str = "") -> Slot:
        return Slot(self, kind, name)


# -- the actor (runs on a node of the cluster) ------------------------------------------------------------


Spec = tuple[str, str, str, str | None, EvalPolicy]
"""a problem as an actor is given it: (key, source, path, precision, policy)"""


class EvalActor:
    """One evaluation service on one GPU (or CPU slot) of the cluster: the problem it was last given and its
    `Evaluator`. Calls from several threads of the driver may arrive at once (a threaded actor); the evaluator
    is thread safe and its locks keep measurements apart."""

    def __init__(self, kind: str, device: str | None = None, tag: str = "ray") -> None:
        # before anything else: whatever the node's environment holds that looks secret is not ours to keep
        self.removed = sorted(k for k in os.environ if SECRETISH.search(k))
        for k in self.removed:
            os.environ.pop(k, None)
        self.kind, self.tag = kind, tag
        """`tag` names where it runs in the verdicts' versions: `ray` (an actor), `host` (a device host)"""
        self.device = device or "cpu"
        if kind == "cuda" and device is None:
            # Ray makes the assigned GPU the only visible one, unless the cluster tells it not to
            ids = _ray_gpu_ids() if os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES") else []
            self.device = f"cuda:{int(ids[0])}" if ids else "cuda:0"
        self._lock = threading.Lock()
        self._key: str | None = None
        self._ev: Any = None

    def hello(self) -> dict[str, Any]:
        """Who and where this actor is (versions are checked by the driver; `removed` says what was scrubbed)."""
        import torch
        import triton

        gpu = torch.cuda.get_device_name(self.device) if self.kind == "cuda" and torch.cuda.is_available() else None
        return {"host": socket.gethostname(), "node": _ray_node() if self.tag == "ray" else None,
                "pid": os.getpid(), "kernelwright": version(),
                "torch": torch.__version__, "triton": triton.__version__, "gpu": gpu, "device": self.device,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "removed": self.removed,
                "secret_names": sorted(k for k in os.environ if SECRETISH.search(k))}

    def _evaluator(self, key: str, source: str, path: str, precision: str | None, policy: EvalPolicy) -> Any:
        from .evaluator import Evaluator
        from .problem import problem_from_source

        with self._lock:
            if self._key != key:
                if self._ev is not None:
                    self._ev.close()
                    self._ev, self._key = None, None
                self._ev = Evaluator(problem_from_source(source, path, precision), self.device, policy)
                self._key = key
            return self._ev

    def evaluate(self, spec: Spec, source: str, quick: bool) -> dict[str, Any]:
        """The verdict, never an exception: a problem or device this node cannot set up is verdict `error`."""
        from .problem import ProblemError

        try:
            ev = self._evaluator(*spec)
        except ProblemError as e:
            result = EvalResult(verdict="error", reason=Reason.BAD_PROBLEM, detail=str(e)[:500], device=self.device)
        except Exception as e:  # noqa: BLE001 - a node's own trouble (no CUDA, out of memory, a package missing)
            where = f"the Ray node {socket.gethostname()}" if self.tag == "ray" else f"the {self.device} host process"
            result = EvalResult(verdict="error", reason=Reason.EVALUATOR_ERROR, device=self.device,
                                detail=f"{where} could not set up the evaluation: "
                                       f"{type(e).__name__}: {str(e).strip()[:300]}")
        else:
            result = ev.evaluate(source, quick=quick)
        if self.tag == "ray":
            result.versions.update(ray_host=socket.gethostname(), ray_node=_ray_node(),
                                   ray_actor_pid=str(os.getpid()))
        else:
            result.versions.update(host_pid=str(os.getpid()))
        return result.model_dump(mode="json")

    def device_facts(self, spec: Spec) -> str:
        return self._evaluator(*spec).device_facts().model_dump_json()

    def profile(self, spec: Spec, source: str, ncu: bool, result: dict[str, Any] | None) -> str:
        res = EvalResult.model_validate(result) if result is not None else None
        return self._evaluator(*spec).profile(source, ncu=ncu, result=res).model_dump_json()

    def close(self) -> None:
        with self._lock:
            if self._ev is not None:
                self._ev.close()
            self._ev, self._key = None, None


def _ray_gpu_ids() -> list[Any]:
    import ray

    return list(ray.get_gpu_ids())


def _ray_node() -> str:
    """The Ray node this actor runs on (its id), which tells nodes of one machine apart where the host cannot."""
    import ray

    return str(ray.get_runtime_context().get_node_id())


# -- the driver's side ------------------------------------------------------------------------------------


_remote_class: Any = None


def _remote() -> Any:
    """EvalActor as a Ray actor class (made once per process)."""
    global _remote_class
    if _remote_class is None:
        import ray

        _remote_class = ray.remote(EvalActor)
    return _remote_class


def _kill(actor: Any) -> None:
    import ray

    try:
        ray.kill(actor)
    except Exception:  # noqa: BLE001 - already gone (or its node is) is as good as killed
        pass


class Slot:
    """One place to evaluate in the cluster, as the driver sees it: an actor that is replaced when lost.

    `evaluator(problem, policy)` gives an `Evaluator`-shaped view of the slot for one problem. Thread safe.
    The replacing and retrying is this class's; how an actor is started, called, closed and killed are the
    four hooks `_start`, `_invoke`, `_close_actor` and `_kill` (here Ray's; `hosts.LocalSlot` has a process
    of this machine instead)."""

    label = "the Ray cluster"
    """what judges, in a verdict that says it could not"""
    versions_key = "ray_slot"

    def __init__(self, cluster: Cluster | None, kind: str, name: str = "", *, retries: int = RETRIES,
                 call_timeout_s: float = CALL_TIMEOUT_S, placement_timeout_s: float = PLACEMENT_TIMEOUT_S) -> None:
        if kind not in ("cuda", "cpu"):
            raise ValueError(f"kind must be cuda or cpu, not {kind!r}")
        self.cluster, self.kind, self.name = cluster, kind, name
        self.retries, self.call_timeout_s, self.placement_timeout_s = retries, call_timeout_s, placement_timeout_s
        self._lock = threading.Lock()
        """guards the fields below; never held while waiting on the cluster"""
        self._starting = threading.Lock()
        """one actor start at a time"""
        self._actor: Any = None
        self._generation = 0
        self.hello: dict[str, Any] = {}
        self.lost: list[str] = []
        """one line per actor this slot lost, oldest first"""
        self._fatal: ClusterError | None = None
        self._closed = False
        self.unplaceable_at: float | None = None
        """when (monotonic) the last start found no room in the cluster; None once an actor started"""

    def _start(self) -> Any:
        import ray

        if self._fatal is not None:
            raise self._fatal  # the same answer at once, not after another actor's start-up
        assert self.cluster is not None
        connect(self.cluster.address)
        actor = _remote().options(num_gpus=1 if self.kind == "cuda" else 0, num_cpus=1, max_restarts=0,
                                  max_concurrency=MAX_CONCURRENCY).remote(self.kind)
        what = "GPU" if self.kind == "cuda" else "CPU"
        try:
            hello = ray.get(actor.hello.remote(), timeout=self.placement_timeout_s)
        except ray.exceptions.GetTimeoutError:
            _kill(actor)
            self.unplaceable_at = time.monotonic()
            raise Unplaceable(f"no {what} of the Ray cluster at {self.cluster.address} took a new evaluation actor "
                              f"within {self.placement_timeout_s:g} s (all in use, or the node is gone)") from None
        except Exception as e:  # noqa: BLE001 - any failure to start is a lost actor
            _kill(actor)
            raise SlotLost(f"a new evaluation actor failed to start: {first_line(e)}") from None
        if hello["kernelwright"] != version():
            _kill(actor)
            self._fatal = ClusterError(f"the Ray node {hello['host']} has kernelwright {hello['kernelwright']} and "
                                       f"this driver {version()}; install the same version on every node")
            raise self._fatal
        if self.kind == "cuda" and not hello["gpu"]:
            _kill(actor)
            raise SlotLost(f"the Ray node {hello['host']} gave an evaluation actor a GPU that torch cannot use")
        if hello["removed"]:
            log.warning("the Ray node %s gave its actors secret-looking variables (%s); the actor removed them, "
                        "but start the cluster without them", hello["host"], ", ".join(hello["removed"]))
        self.hello = hello
        self.unplaceable_at = None
        return actor

    def actor(self) -> tuple[Any, int]:
        """The slot's actor and its generation, starting one if there is none. A start (which may wait up to
        `placement_timeout_s` for a free GPU) holds only `_starting`: `close` and `_drop` never wait for it."""
        with self._starting:
            with self._lock:
                if self._closed:
                    raise SlotLost("the evaluation slot was closed")
                if self._actor is not None:
                    return self._actor, self._generation
            actor = self._start()
            with self._lock:
                if not self._closed:
                    self._actor = actor
                    self._generation += 1
                    return actor, self._generation
            self._kill(actor)  # closed while it started
            raise SlotLost("the evaluation slot was closed")

    def _drop(self, generation: int, why: str) -> None:
        """Forget and kill the actor of `generation` (once, however many calls saw it go). An unreachable actor
        may come back and would keep its GPU: it is killed all the same."""
        with self._lock:
            if self._actor is None or generation != self._generation:
                return
            actor, self._actor = self._actor, None
            self.lost.append(why)
        self._kill(actor)

    def call(self, method: str, *args: Any) -> Any:
        """`actor.method(*args)` on this slot's actor, replacing a lost actor and trying again; SlotLost once
        `retries` fresh actors were lost too. An exception raised by the method itself is raised here."""
        line = ""
        for attempt in range(self.retries + 1):
            actor, generation = self.actor()
            try:
                return self._invoke(actor, method, args)
            except Lost as e:
                line = str(e)
            self._drop(generation, line)
            log.warning("evaluation slot %s: %s; %s", self.name, line,
                        "trying a fresh actor" if attempt < self.retries else "giving up on this call")
        raise SlotLost(f"{self.retries + 1} evaluation actors in a row were lost; the last: {line}")

    def evaluator(self, problem: Problem, policy: EvalPolicy, own_slot: bool = False) -> RemoteEvaluator:
        """An `Evaluator`-shaped view of this slot for `problem`; with `own_slot`, closing it closes the slot."""
        return RemoteEvaluator(self, problem, policy, own_slot)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            actor, self._actor = self._actor, None
        if actor is not None:
            self._close_actor(actor)
            self._kill(actor)

    # -- the hooks: Ray's ---------------------------------------------------------------------------------

    def _where(self) -> str:
        node = f"node {str(self.hello['node'])[:8]}, " if self.hello.get("node") else ""
        return f"the actor on {self.hello.get('host')} ({node}pid {self.hello.get('pid')})"

    def _invoke(self, actor: Any, method: str, args: tuple[Any, ...]) -> Any:
        """The call on `actor`; Lost when it is gone or hung, else its result or its own exception."""
        import ray

        where = self._where()  # the actor called, whatever another thread starts meanwhile
        try:
            return ray.get(getattr(actor, method).remote(*args), timeout=self.call_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise Lost(f"{where} gave no answer within {self.call_timeout_s:g} s") from None
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if isinstance(e.cause, Exception) else None
            raise (cause or RuntimeError(first_line(e))) from None
        except (ray.exceptions.RayError, ConnectionError) as e:  # died, node lost, unreachable, out of memory
            raise Lost(f"{where} was lost ({first_line(e)})") from None

    def _close_actor(self, actor: Any) -> None:
        import ray

        try:
            ray.get(actor.close.remote(), timeout=60)
        except Exception:  # noqa: BLE001 - it is killed next either way
            pass

    def _kill(self, actor: Any) -> None:
        _kill(actor)


def version() -> str:
    """This installation's kernelwright version (the driver's and every actor's must be the same)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("kernelwright")
    except PackageNotFoundError:
        return "unknown"


def first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


class RemoteEvaluator:
    """`Evaluator`'s surface (evaluate, device_facts, profile, close) for one problem, on a cluster slot."""

    def __init__(self, slot: Slot, problem: Problem, policy: EvalPolicy, own_slot: bool = False) -> None:
        self.slot, self.problem = slot, problem
        self.device = getattr(slot, "device", slot.kind)
        key = hashlib.sha256(f"{problem.path}\0{problem.source}\0{problem.precision}\0{policy!r}".encode()).hexdigest()
        self._spec: Spec = (key, problem.source, problem.path, problem.precision.value, replace(policy))
        self._own_slot = own_slot

    def evaluate(self, source: str, *, quick: bool = False) -> EvalResult:
        """The verdict, from whichever actor the slot holds; never raises: verdict `error` when no actor could
        judge (every one tried was lost, the cluster is gone, a node cannot set up the evaluation)."""
        t0 = time.monotonic()
        try:
            data = self.slot.call("evaluate", self._spec, source, quick)
        except Exception as e:  # noqa: BLE001 - the judge could not judge; the run goes on and judges it later
            detail = str(e) if isinstance(e, (SlotLost, ClusterError)) else first_line(e)
            return EvalResult(verdict="error", reason=Reason.EVALUATOR_ERROR, device=self.device,
                              precision=self.problem.precision.value,
                              detail=f"{self.slot.label} could not judge this candidate: {detail}",
                              phases={"total_s": round(time.monotonic() - t0, 3)})
        result = EvalResult.model_validate(data)
        result.versions[self.slot.versions_key] = self.slot.name
        return result

    def device_facts(self) -> DeviceFacts:
        if self.slot.kind == "cpu":
            return cpu_facts()
        return DeviceFacts.model_validate_json(self.slot.call("device_facts", self._spec))

    def profile(self, source: str, ncu: bool = False, result: EvalResult | None = None) -> Profile:
        data = result.model_dump(mode="json") if result is not None else None
        return Profile.model_validate_json(self.slot.call("profile", self._spec, source, ncu, data))

    def close(self) -> None:
        if self._own_slot:
            self.slot.close()
