"""Evaluation as the roles use it: one `Evaluations` per run, holding that run's evaluators (one per
device) and caching verdicts in the run directory by kernel hash, so a kernel is judged once per run (a
resumed run re-reads the verdict instead of measuring again).

Run-scoped on purpose: two runs in one process never share an evaluator, a policy or a worker pool.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kernelwright.evaluators import DeviceFacts, EvalPolicy, EvalResult, Evaluator, problem_from_source
from kernelwright.evaluators.cluster import Cluster, RemoteEvaluator, Slot
from kernelwright.evaluators.facts import cpu_facts
from kernelwright.evaluators.hosts import LocalSlot
from kernelwright.evaluators.profiling import NcuReport, Profile, ncu_unavailable_reason, problem_bytes
from kernelwright.evaluators.variants import VARIANTS, Shape, fixed_constants, shapes_for

from .runstore import Run, kernel_hash

log = logging.getLogger(__name__)

VARIANT_CPU_MAX_ELEMENTS = 1 << 22
"""input elements above which a shape variant is not run in Triton's interpreter (too slow for a quick check)"""

PASS_OVER_S = 600.0
"""how long a cluster slot that found no room for a new actor (a node lost, none in its place) is passed over,
its candidates judged by the run's other actors, before it is tried again"""


@dataclass
class VariantCheck:
    """The quick check of a draft at one shape variant (`evaluators.variants`)."""

    shape: Shape
    result: EvalResult | None = None
    """None: not run (`why_not` says why)"""
    why_not: str = ""

    @property
    def passed(self) -> bool:
        return self.result is not None and self.result.verdict == "pass"

    def line(self) -> str:
        """`odd (batch_size=13, dim=3071): fail: wrong_output: ...`, bounded."""
        if self.result is None:
            return f"{self.shape.name}: not run: {self.why_not}"[:400]
        if self.passed:
            return f"{self.shape.label()}: pass"
        return f"{self.shape.label()}: {self.result.verdict}: {self.result.reason}: {self.result.detail or ''}"[:700]


class Evaluations:
    """The evaluators of one run (lazily built per device) and its verdict cache."""

    def __init__(self, run: Run, precision: str | None = None, trials: int = 5, spares: int = 1,
                 cluster: str = "", kind: str = "cpu", hosts: bool = False, compile_mode: str = "default") -> None:
        self.run = run
        self.compile_mode = None if compile_mode == "none" else compile_mode
        """torch.compile's mode for the compiled baseline (`EvalPolicy.compile_mode`; None: no compiled baseline)"""
        self.precision = precision
        self.trials, self.spares = trials, spares
        self.cluster, self.kind = cluster, kind
        """with a `cluster` (`--cluster`), devices named `ray:K` are actors of that Ray cluster, of `kind`"""
        self.hosts = hosts
        """each local device judged in a host process of its own (`evaluators.hosts`)"""
        self._evaluators: dict[str, Evaluator | RemoteEvaluator] = {}
        self._variant_evaluators: dict[tuple[str, str], Evaluator] = {}
        """(device, variant) -> the quick check's evaluator of the problem at that variant (local devices)"""
        self._variants: tuple[dict[str, Shape], dict[str, str]] | None = None
        self._variants_lock = threading.Lock()
        self._fixed: dict[str, int] | None = None
        """the size constants no variant changes (`fixed_sizes`), read once per run"""
        self._facts: dict[str, DeviceFacts] = {}
        self._facts_locks: dict[str, threading.Lock] = {}
        """per device: its facts are read once, whichever thread asks first (the others wait for them)"""
        self._prepared: dict[str, threading.Event] = {}
        """per device: set when `prepare` is done with it (ready, or failed)"""
        self._lock = threading.Lock()
        self._closed = False

    def evaluator(self, device: str) -> Evaluator | RemoteEvaluator:
        """The evaluator of `device`: a local one, or for `ray:K` the K-th actor slot of the run's cluster
        (its actor started on first use, anywhere in the cluster Ray finds a free GPU)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this run's evaluators are closed")
            ev = self._evaluators.get(device)
            if ev is None:
                problem = problem_from_source(self.run.problem_source(), self.run.info().problem, self.precision)
                policy = EvalPolicy(trials=self.trials, spares=self.spares, compile_mode=self.compile_mode)
                if device.startswith("ray:"):
                    # connected on the actor's first start (inside the evaluation, whose verdict says if it fails)
                    slot = Slot(Cluster(self.cluster), self.kind, name=f"{self.run.id}/{device}")
                    ev = slot.evaluator(problem, policy, own_slot=True)
                elif self.hosts:  # started on first use, like an actor
                    ev = LocalSlot(device, name=f"{self.run.id}/{device}").evaluator(problem, policy, own_slot=True)
                else:
                    ev = Evaluator(problem, device, policy)
                self._evaluators[device] = ev
            return ev

    def cached(self, h: str) -> EvalResult | None:
        """The run's verdict on kernel `h`, if it was judged."""
        data = self.run.eval(h)
        return EvalResult.model_validate(data) if data is not None else None

    def evaluate(self, source: str, device: str, *, store: bool = True) -> tuple[str, EvalResult]:
        """(kernel hash, verdict): from the run's cache when this exact source was judged before. `store`: keep
        the source as a kernel of the run (`kernels/<h>.py`); a draft the coder only checks is not kept, but its
        verdict is (`evals/<h>.json`), so that it is reused when the same source becomes the child."""
        h = self.run.put_kernel(source) if store else kernel_hash(source)
        cached = self.cached(h)
        if cached is not None:
            return h, cached
        result = self._judged(device, lambda ev: ev.evaluate(source))
        if result.verdict != "error":  # a failure of the judge is not a fact about the kernel: judge it again later
            self.run.put_eval(h, result.model_dump(mode="json"))
        return h, result

    def confirm(self, h: str, device: str) -> EvalResult:
        """Judge kernel `h` again, past the cache: a new battery of input draws (each evaluation draws its own from
        the secret seed) on the same evaluator. A failure replaces the run's cached verdict (the kernel is never
        trusted again, in this run or on resume); a pass leaves the first verdict, with its timing, in place."""
        result = self._judged(device, lambda ev: ev.evaluate(self.run.kernel(h)))
        if result.verdict == "fail":
            result.detail = f"a second judgement with fresh draws failed it: {result.detail}"
            self.run.put_eval(h, result.model_dump(mode="json"))
        return result

    def warm(self, source: str, devices: list[str]) -> list[threading.Thread]:
        """Judge `source` (the seed) on each of `devices` in the background and drop the verdicts: by the time
        the first generation reaches those devices, their workers, memory plan, reference and torch.compile
        baseline (or, on a cluster, their actors) are ready, instead of being set up on its critical path."""
        threads = [threading.Thread(target=self._warm_one, args=(source, d), name=f"kernelwright-warm-{d}",
                                    daemon=True) for d in devices]
        for t in threads:
            t.start()
        return threads

    def _warm_one(self, source: str, device: str) -> None:
        t0 = time.monotonic()
        try:
            result = self.evaluator(device).evaluate(source)
        except Exception as e:  # noqa: BLE001 - closed meanwhile, or a device that cannot start: the branch will say
            log.info("warming %s did not finish: %s: %s", device, type(e).__name__, e)
            return
        log.info("warmed %s in %.1f s (the seed: %s)", device, time.monotonic() - t0, result.verdict)

    def prepare(self, devices: Sequence[str]) -> list[threading.Thread]:
        """Set up each of `devices` in the background, with no candidate, while the run has nothing to judge yet
        (its model writes the first kernel): the evaluator built, its device's facts read, then
        `Evaluator.prepare` (workers ready for the first quick check and verification, the memory plan, the
        reference battery and, on a GPU, the eager and torch.compile baselines and the roofline's peaks), so that
        the first verification finds them ready. The
        writer's quick checks run on the same evaluators meanwhile, as branches share one. Never raises into the
        run: a device that cannot be set up is logged and left to the evaluation that needs it, which says why.
        On a cluster or host process, the actor (or host) is started and its facts read: the evaluator there is
        built by that. `prepared(device)` says when a device is done; `preparing()` which are not yet."""
        threads = []
        for d in devices:
            with self._lock:
                if d in self._prepared:  # asked already in this run: once is enough
                    continue
                self._prepared[d] = threading.Event()
            threads.append(threading.Thread(target=self._prepare_one, args=(d,), name=f"kernelwright-prepare-{d}",
                                            daemon=True))
        for t in threads:
            t.start()
        return threads

    def prepared(self, device: str) -> threading.Event | None:
        """Set once `prepare` is done with `device` (None: not asked to prepare it)."""
        return self._prepared.get(device)

    def preparing(self) -> list[str]:
        """The devices `prepare` is still setting up."""
        with self._lock:
            return [d for d, done in self._prepared.items() if not done.is_set()]

    def _prepare_one(self, device: str) -> None:
        t0 = time.monotonic()
        record: dict[str, object] = {"device": device}
        try:
            ev = self.evaluator(device)
            slot = getattr(ev, "slot", None)
            if slot is not None:  # a cluster actor or a device host: started now, not at the first verdict
                slot.actor()
            record["evaluator_s"] = round(time.monotonic() - t0, 3)
            t1 = time.monotonic()
            # first: the facts are what the writer's prompt waits for (read under the measurement lock on a GPU,
            # which the baselines below hold for seconds); the writer then finds them read, or reads them itself
            self.facts(device)
            record["facts_s"] = round(time.monotonic() - t1, 3)
            prepare = getattr(ev, "prepare", None)
            if prepare is not None:
                record.update(prepare())
            else:  # judged in another process: the evaluator there is built by its facts (on a GPU)
                record["outcome"] = "started; the rest is set up at its first evaluation (its evaluator has no prepare)"
        except Exception as e:  # noqa: BLE001 - closed meanwhile, or a device that cannot start: its evaluation says
            record["outcome"] = f"not prepared: {type(e).__name__}: {str(e).strip()[:300]}"
        try:
            # from the thread's start: the evaluator's construction (its pool, the reference model) included
            record["seconds"] = round(time.monotonic() - t0, 3)
            log.info("prepared %s in %.1f s: %s", device, record["seconds"], record.get("outcome"))
            self.run.put_blob("prepare", f"{device.replace(':', '_')}.json", json.dumps(record, indent=1, default=str))
        except OSError as e:  # the record is informative
            log.info("could not keep the preparation record of %s: %s", device, e)
        finally:
            self._prepared[device].set()

    def quick(self, source: str, device: str) -> EvalResult:
        """The coder's quick check of a draft: one trial of each input family plus the problem's
        `get_test_inputs()` sets, every guard, no timing but a rough one on a GPU (a check named `rough_time`)
        (`Evaluator.evaluate(quick=True)`), in this run's evaluator and its workers. Not cached: a draft is not a
        candidate, and its verdict admits nothing."""
        return self._judged(device, lambda ev: ev.evaluate(source, quick=True))

    def variants(self) -> tuple[dict[str, Shape], dict[str, str]]:
        """The problem's shape variants (`evaluators.variants`: small, odd, tail) by name, and those left out
        with why; built once per run (it runs the reference at each variant on the CPU, in this process)."""
        with self._variants_lock:
            if self._variants is None:
                try:
                    shapes, dropped, sizes = shapes_for(self.run.problem_source(), self.run.info().problem, VARIANTS)
                except Exception as e:  # noqa: BLE001 - a problem whose variants cannot be built has none
                    why = f"could not be built ({type(e).__name__}: {str(e).strip()[:200]})"
                    shapes, dropped, sizes = [], {n: why for n in VARIANTS}, None
                if sizes == {}:
                    dropped = {n: "the problem has no size constants (module-level ints of at least 8 that "
                                  "get_inputs() reads)" for n in VARIANTS}
                self._variants = ({s.name: s for s in shapes[1:]}, dropped)
            return self._variants

    def fixed_sizes(self) -> dict[str, int]:
        """The problem's size constants that no shape variant changes (read only by get_init_inputs: the weights'
        shapes), for the quick check to name (`evaluators.variants.fixed_constants`)."""
        with self._variants_lock:
            if self._fixed is None:
                try:
                    module = problem_from_source(self.run.problem_source(), self.run.info().problem).module
                    self._fixed = fixed_constants(module)
                except Exception:  # noqa: BLE001 - a problem that cannot be loaded here has no variants either
                    self._fixed = {}
            return self._fixed

    def quick_variants(self, source: str, device: str, names: Sequence[str]) -> list[VariantCheck]:
        """The coder's quick check of a draft at shape variants, each judged apart by an evaluator of the problem
        at those sizes (`problem_from_source(..., sizes=)`): quick mode, every guard, no timing, in workers of
        `device`'s pool. Not cached: a draft is not a candidate. Local devices only: a device judged by a host
        process or a cluster actor holds one problem at a time, so there the variants are not run (said so)."""
        shapes, dropped = self.variants()
        out: list[VariantCheck] = []
        for name in names:
            shape = shapes.get(name)
            if shape is None:
                out.append(VariantCheck(Shape(name, {}, None), why_not=dropped.get(name, "unknown variant")))
                continue
            if device.startswith("ray:") or self.hosts:
                out.append(VariantCheck(shape, why_not="shape variants are checked only where the device is judged "
                                                       "in the run's own process (not by host processes or a cluster)"))
                continue
            if device == "cpu" and (shape.elements or 0) > VARIANT_CPU_MAX_ELEMENTS:
                out.append(VariantCheck(shape, why_not=f"{shape.elements:,} input elements: too slow for Triton's "
                                                       "interpreter"))
                continue
            try:
                ev = self._variant_evaluator(device, shape)
            except Exception as e:  # noqa: BLE001 - the reference at this shape, not the draft: say so, go on
                out.append(VariantCheck(shape, why_not=f"the reference could not be set up at these sizes "
                                                       f"({type(e).__name__}: {str(e).strip()[:200]})"))
                continue
            out.append(VariantCheck(shape, ev.evaluate(source, quick=True)))
        return out

    def _variant_evaluator(self, device: str, shape: Shape) -> Evaluator:
        """The evaluator of the problem at `shape` on `device` (local), built on first use, sharing the worker
        pool of `device`'s own evaluator (no other workers are started); closed with the others."""
        main = self.evaluator(device)
        if not isinstance(main, Evaluator):
            raise RuntimeError(f"{device} is not judged in this process")
        with self._lock:
            if self._closed:
                raise RuntimeError("this run's evaluators are closed")
            ev = self._variant_evaluators.get((device, shape.name))
            if ev is None:
                problem = problem_from_source(self.run.problem_source(), self.run.info().problem, self.precision,
                                              sizes=shape.sizes)
                # a variant is there for its shapes (a tail, a second chunk): the base family alone, in quick mode
                # the ordering check of a draft that waits on tickets ran at the problem's own shapes first
                policy = EvalPolicy(trials=self.trials, spares=self.spares, timing=False, families=("base",),
                                    ordering_check=False)
                ev = Evaluator(problem, device, policy, pool=main.pool)
                self._variant_evaluators[(device, shape.name)] = ev
            return ev

    def _unplaceable(self, device: str) -> float | None:
        """When `device`'s cluster slot last found no room for an actor (None: it has one, or is not a slot)."""
        slot = getattr(self._evaluators.get(device), "slot", None)
        return getattr(slot, "unplaceable_at", None) if device.startswith("ray:") else None

    def _judged(self, device: str, judge: Callable[[Evaluator | RemoteEvaluator], EvalResult]) -> EvalResult:
        """`judge` on `device`'s evaluator; on a cluster, when that slot finds no room for an actor (its node
        lost, none in its place), on the run's other actors instead, so that the run neither stalls on the
        placement timeout each time nor loses the branches of that slot. A slot passed over is tried again
        after `PASS_OVER_S`, or when no other is left."""
        if not device.startswith("ray:"):
            return judge(self.evaluator(device))
        now = time.monotonic()

        def passed_over(d: str) -> bool:
            at = self._unplaceable(d)
            return at is not None and now - at < PASS_OVER_S

        with self._lock:
            others = sorted(d for d in self._evaluators if d.startswith("ray:") and d != device)
        order = [d for d in others if not passed_over(d)]
        order = [*order, device] if passed_over(device) else [device, *order]
        result: EvalResult | None = None
        for d in order:
            result = judge(self.evaluator(d))
            if result.verdict != "error" or self._unplaceable(d) is None:
                if d != device:
                    log.warning("%s has no actor (no room in the cluster); judged on %s instead", device, d)
                    result.versions["judged_for"] = device
                return result
        assert result is not None
        return result

    def facts(self, device: str) -> DeviceFacts:
        """The device's facts (`evaluators.facts`), read once per device per run."""
        if device == "cpu" or (device.startswith("ray:") and self.kind == "cpu"):
            return cpu_facts()
        with self._lock:
            lock = self._facts_locks.setdefault(device, threading.Lock())
        with lock:  # `prepare` reads them in a thread of its own while the writer's prompt asks for them
            if device not in self._facts:
                facts = self.evaluator(device).device_facts()
                # kept with the run, so what it was judged on can be read after the machine is gone (report)
                self.run.put_blob("devices", f"{device.replace(':', '_')}.json", facts.model_dump_json(indent=1))
                self._facts[device] = facts
        return self._facts[device]

    def profile(self, h: str, device: str, ncu: bool = False) -> Profile:
        """The analyst's view of a kernel of this run: its verdict and timing, the kernels it launched, the
        device-time breakdown of a profiled run and, with `ncu`, Nsight Compute's counters."""
        return self.evaluator(device).profile(self.run.kernel(h), ncu=ncu, result=self.cached(h))

    def collect_evidence(self, h: str, device: str, ncu: bool = True) -> Profile:
        """Profile kernel `h` (a verified, timed kernel of this run) and keep the profile in the run
        directory (`profiles/<h>.json`), where `evidence` finds it; `ncu` only when Nsight Compute exists.
        A profile that fails says why in its fields; it never raises for the candidate's sake."""
        t0 = time.monotonic()
        # on a cluster, whether Nsight Compute can run is the node's to say (its profile says why not)
        why = None if ncu and device.startswith("ray:") else \
            ncu_unavailable_reason() if ncu else "not requested for this run (--profile torch)"
        prof = self.profile(h, device, ncu=ncu and why is None)
        if why and not prof.ncu.available:
            prof.ncu = NcuReport(available=False, why=why)
        prof.collect_s = round(time.monotonic() - t0, 3)
        self.run.put_blob("profiles", f"{h}.json", prof.model_dump_json(indent=1))
        return prof

    def evidence(self, h: str) -> Profile:
        """What is known of kernel `h` without running anything: its stored profile (the seed's and each
        admitted elite's on a GPU), else its verdict, timing and launched kernels with why the rest is missing."""
        path = self.run.path / "profiles" / f"{h}.json"
        if path.exists():
            try:
                return Profile.model_validate(json.loads(path.read_text()))
            except ValueError:
                pass  # an unreadable profile is treated as none
        result = self.cached(h)
        prof = Profile(verdict=result.verdict if result else "", reason=str(result.reason) if result else "",
                       timing=result.timing if result else None,
                       kernels=[k.model_dump() for k in result.kernels] if result else [],
                       problem_bytes=problem_bytes(result) if result else None)
        if result is None:
            why = "this kernel was not judged in this run"
        elif result.device == "cpu":
            why = "no GPU: kernels ran in Triton's interpreter, so no device time or counters exist"
        elif result.timing is None:
            why = f"not timed ({result.timing_unavailable})"
        else:
            why = ("not profiled: only the seed and each newly admitted elite are profiled (and a losing child "
                   "where a model analyses)")
        prof.breakdown_unavailable = why
        prof.ncu = NcuReport(available=False, why=why)
        return prof

    def close(self) -> None:
        with self._lock:
            self._closed = True
            # the variants' evaluators first: they use the pools of the devices' own evaluators
            evaluators = [*self._variant_evaluators.values(), *self._evaluators.values()]
            self._variant_evaluators.clear()
            self._evaluators.clear()
        for ev in evaluators:
            ev.close()
