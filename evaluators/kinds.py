"""What kind of problem a reference is: matmul, row_reduction, conv, strided, elementwise (several at once for a
fused problem), so that advice measured on one kind (the playbook, earlier runs' knowledge) reaches problems of
that kind and no other.

The reference's forward is run on PyTorch's meta device (shapes and dtypes, no storage: `footprint.meta_problem`)
under a dispatch mode that notes every ATen op and whether a pointwise op reads a tensor through strides that
are not its layout (a transpose or permute). When the forward cannot run there, the problem's source is read
instead (the names it calls). Runs in the trusted process, on the user's own problem; imports nothing above
evaluators/.
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Iterable
from functools import lru_cache
from typing import Any, Literal

import torch

from . import pyast
from .torch_private import TorchDispatchMode

log = logging.getLogger(__name__)

Kind = Literal["matmul", "conv", "row_reduction", "strided", "elementwise"]
KINDS: tuple[str, ...] = ("matmul", "conv", "row_reduction", "strided", "elementwise")
"""every kind, in the order a problem's kinds are listed"""

_MATMUL = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "matmul", "linear", "einsum",
           "_scaled_mm", "_int_mm", "tensordot", "chain_matmul", "outer", "ger", "addr"}
_ATTENTION_PREFIX = "_scaled_dot_product"
_CONV_PREFIXES = ("convolution", "conv", "_convolution", "cudnn_convolution", "mkldnn_convolution", "slow_conv",
                  "thnn_conv", "_slow_conv")
_REDUCTION = {
    "sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "logsumexp", "cumsum", "cumprod",
    "cummax", "cummin", "logcumsumexp", "var", "std", "var_mean", "std_mean", "norm", "linalg_vector_norm",
    "_softmax", "_safe_softmax", "softmax", "_log_softmax", "log_softmax", "native_layer_norm", "layer_norm",
    "native_group_norm", "group_norm", "native_batch_norm", "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training",
    "batch_norm", "instance_norm", "rms_norm", "_fused_rms_norm", "nll_loss_forward", "nll_loss2d_forward",
    "cross_entropy_loss", "all", "any", "count_nonzero", "median", "nanmedian", "mode", "topk", "sort",
    "kthvalue", "nansum", "aminmax", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_similarity", "pairwise_distance",
    "cdist", "_cdist_forward", "triplet_margin_loss", "margin_ranking_loss", "hinge_embedding_loss",
}
_NOT_WORK = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "ones",
    "ones_like", "full", "full_like", "fill_", "zero_", "view", "_unsafe_view", "reshape", "_reshape_alias",
    "as_strided", "expand", "permute", "transpose", "t", "unsqueeze", "squeeze", "select", "slice", "split",
    "split_with_sizes", "unbind", "alias", "detach", "lift_fresh", "sym_size", "sym_stride", "sym_numel",
    "arange", "scalar_tensor", "_local_scalar_dense", "randn", "rand", "randint", "normal_", "uniform_",
    "_to_copy", "to", "copy_", "lift_fresh_copy", "numpy_T", "unfold", "view_as", "expand_as", "flatten",
}
"""ops that create, view or copy-as-is tensors: no kind of their own (a copy of a strided view is `strided`)"""
_COPIES = {"clone", "contiguous", "copy_", "_to_copy"}


def _op_kind(name: str) -> str | None:
    """The kind one ATen op (its overload packet's name) makes a problem, or None for none in particular."""
    if name in _MATMUL or name.startswith(_ATTENTION_PREFIX):
        return "matmul"
    if name.startswith(_CONV_PREFIXES):
        return "conv"
    if name in _REDUCTION:
        return "row_reduction"
    return None


def kinds_of_ops(ops: Iterable[str], strided: bool = False) -> list[str]:
    """The kinds of a forward that calls `ops` (ATen op names), `strided` when a pointwise op or a copy reads a
    transposed or permuted view: every kind found, in `KINDS` order, or ["elementwise"] when none is (a forward
    of pointwise ops only). Attention counts as matmul and row_reduction (its softmax)."""
    found: set[str] = set()
    for name in ops:
        kind = _op_kind(name)
        if kind is not None:
            found.add(kind)
        if name.startswith(_ATTENTION_PREFIX):
            found.add("row_reduction")
    if strided:
        found.add("strided")
    return [k for k in KINDS if k in found] or ["elementwise"]


def _permuted(t: torch.Tensor) -> bool:
    """A view whose strides are not in decreasing order over its non-broadcast, non-unit dims: a transpose or a
    permute, read across its storage's layout (a broadcast, expanded or sliced view is not)."""
    strides = [s for n, s in zip(t.shape, t.stride()) if n > 1 and s != 0]
    return any(a < b for a, b in zip(strides, strides[1:]))


class _Ops(TorchDispatchMode):
    """Notes each ATen op's name, and whether an op that works element by element (not a matmul, convolution
    or view) reads a permuted view whose result is not only a matmul's operand."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()
        self.pending: dict[int, tuple[torch.Tensor, int]] = {}
        """results of pointwise ops or copies that read permuted views, and views of them, by id -> (the tensor,
        held so that no id is reused; the id of the result it is a view of), until a matmul consumes one: a
        matmul's operand scaled or made contiguous on the way (`q @ k.transpose(-2, -1)` on 4-D tensors,
        attention's math) is no strided work"""

    @property
    def strided(self) -> bool:
        return bool(self.pending)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = func.overloadpacket.__name__
        self.ops.add(name)
        tensors = [a for a in [*args, *(kwargs or {}).values()] if isinstance(a, torch.Tensor)]
        out = func(*args, **(kwargs or {}))
        kind = _op_kind(name)
        if kind in ("matmul", "conv"):
            roots = {self.pending[id(a)][1] for a in tensors if id(a) in self.pending}
            self.pending = {k: v for k, v in self.pending.items() if v[1] not in roots}
        elif not isinstance(out, torch.Tensor):
            pass
        elif name in _COPIES or name not in _NOT_WORK:
            if any(a.dim() > 1 and _permuted(a) for a in tensors):
                self.pending[id(out)] = (out, id(out))
        elif tensors and id(tensors[0]) in self.pending:
            # a view of such a result (reshaped for a matmul) stays pending, tied to it
            self.pending[id(out)] = (out, self.pending[id(tensors[0])][1])
        return out


def traced_kinds(problem: Any) -> list[str]:
    """The kinds of a loaded `Problem`, from its forward on the meta device; raises when it cannot run there."""
    from .footprint import meta_problem

    model, inputs = meta_problem(problem)
    mode = _Ops()
    with torch.no_grad(), mode:
        model(*inputs)
    return kinds_of_ops(mode.ops, mode.strided)


_SOURCE_NAMES = {
    "matmul": {"matmul", "mm", "bmm", "baddbmm", "addmm", "linear", "Linear", "Bilinear", "einsum", "tensordot",
               "scaled_dot_product_attention", "MultiheadAttention", "outer", "mv", "dot"},
    "conv": {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "Conv1d",
             "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"},
    "row_reduction": {"softmax", "log_softmax", "Softmax", "LogSoftmax", "layer_norm", "LayerNorm", "group_norm",
                      "GroupNorm", "batch_norm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "instance_norm",
                      "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "rms_norm", "RMSNorm", "norm", "sum",
                      "mean", "max", "min", "amax", "amin", "argmax", "argmin", "prod", "logsumexp", "cumsum",
                      "cumprod", "var", "std", "cross_entropy", "nll_loss", "CrossEntropyLoss", "mse_loss",
                      "kl_div", "cosine_similarity", "median", "topk", "sort", "normalize",
                      "scaled_dot_product_attention", "MultiheadAttention"},
}
_STRIDED_ATTRIBUTES = {"transpose", "permute", "t", "T", "mT", "swapaxes", "swapdims", "movedim"}
"""read as attributes only (`x.t()`), never as bare names (a variable `t`)"""


def source_kinds(source: str) -> list[str]:
    """The kinds of a problem read from its source alone (the names its code calls or reads), for a forward that
    cannot run on the meta device; ["elementwise"] when none is named, [] when the source does not parse."""
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return []
    names: set[str] = set()
    attributes: set[str] = set()
    matmul_operator = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
            attributes.add(node.attr)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            matmul_operator = True
    found = {k for k, words in _SOURCE_NAMES.items() if names & words}
    if matmul_operator:
        found.add("matmul")
    if attributes & _STRIDED_ATTRIBUTES:
        found.add("strided")
    return [k for k in KINDS if k in found] or ["elementwise"]


@lru_cache(maxsize=64)
def problem_kinds(source: str, path: str = "problem.py") -> tuple[str, ...]:
    """The kinds of the problem whose source is `source`: traced on the meta device, else read from the source
    (a problem that cannot be loaded at all gives what its source names). Cached per source: a run asks once per
    step, and the answer never changes."""
    from .problem import ProblemError, problem_from_source

    try:
        return tuple(traced_kinds(problem_from_source(source, path)))
    except ProblemError as e:
        log.info("%s: kinds read from the source (%s)", path, e)
    except Exception as e:  # noqa: BLE001 - any forward the meta device cannot run: read the source instead
        log.info("%s: kinds read from the source: the forward cannot run on the meta device (%s: %s)", path,
                 type(e).__name__, str(e)[:200])
    return tuple(source_kinds(source))
