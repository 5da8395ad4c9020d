"""The evaluation service: problem loading, sandboxed workers, the correctness battery, anti-cheat checks.

Knows torch and triton; nothing of agents or graphs. The public surface is below.
"""

from .device import DeviceError, default_device, resolve_device
from .evaluator import EvalPolicy, Evaluator
from .facts import DeviceFacts, render_facts
from .pool import Limits, WorkerPool
from .problem import Precision, Problem, ProblemError, load_problem, problem_from_source
from .result import Check, EvalResult, Reason, Timing

__all__ = [
    "Check", "DeviceError", "DeviceFacts", "EvalPolicy", "EvalResult", "Evaluator", "Limits", "Precision", "Problem",
    "ProblemError", "Reason", "Timing", "WorkerPool", "default_device", "load_problem", "problem_from_source", "render_facts", "resolve_device",
]
