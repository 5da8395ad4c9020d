"""Every private torch API kernelwright relies on, bound in one place and checked against the torch versions it is
tested with (2.11 on the GPU image, 2.13 on the CPU).

Private APIs change between torch releases without notice. Importing them here, and only here (a test keeps it so),
means a torch that renamed one fails at one import with one sentence, and a torch outside the tested versions is
named once (`untested`), instead of a missing attribute surfacing mid-evaluation in a module that never said it
leaned on internals. The bindings are taken when this module is imported, before any candidate runs, so nothing a
candidate later replaces on `torch` reaches them.
"""

from __future__ import annotations

import torch

TESTED = ("2.11", "2.13")
"""torch major.minor versions the evaluation service is tested with"""

try:
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401 - re-exported
    from torch._ops import OpOverload  # noqa: F401 - re-exported: the guards take over its `_op_dk`
    from torch.utils._pytree import tree_flatten  # noqa: F401 - re-exported

    has_internal_overlap = torch._debug_has_internal_overlap
    """whether a tensor's elements overlap in memory (an expanded or self-overlapping layout)"""

    cuda_sleep = torch.cuda._sleep
    """a kernel that keeps the GPU busy for a number of cycles: the timing fills the launch queue with it"""

    # the torch-dispatch stack and the Python dispatch keys, as the guards read and repair them after each forward
    dispatch_stack_len = torch._C._len_torch_dispatch_stack
    dispatch_stack_at = torch._C._get_dispatch_stack_at
    dispatch_stack_push = torch._C._push_on_torch_dispatch_stack
    dispatch_stack_pop = torch._C._pop_torch_dispatch_stack
    key_excluded = torch._C._dispatch_tls_is_dispatch_key_excluded
    set_key_excluded = torch._C._dispatch_tls_set_dispatch_key_excluded
    PYTHON_DISPATCH_KEYS = tuple(getattr(torch._C.DispatchKey, k) for k in ("Python", "PythonTLSSnapshot")
                                 if hasattr(torch._C.DispatchKey, k))
except (ImportError, AttributeError) as e:  # pragma: no cover - only on a torch that moved an internal
    raise ImportError(f"torch {torch.__version__} lacks an internal API the evaluation service needs ({e}); "
                      f"kernelwright is tested with torch {' and '.join(TESTED)}") from None


def untested(version: str | None = None) -> str | None:
    """One sentence when the torch in use (or `version`) is not one the evaluation service is tested with."""
    v = version or torch.__version__
    if ".".join(v.split("+")[0].split(".")[:2]) in TESTED:
        return None
    return (f"torch {v} is not a version kernelwright is tested with ({' and '.join(TESTED)}): the private APIs "
            "the verifier's guards use may behave differently")
