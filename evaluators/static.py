"""Static pre-filter: cheap AST rules that reject obviously hostile candidates before anything runs.

It is the first line, never the only one: aliasing evades any syntax check, so the run-time guards in
the worker decide. Each rule has a stable name that the verdict carries (`EvalResult.rule`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

ALLOWED_IMPORTS = {
    "__future__", "math", "typing", "functools", "itertools", "operator", "dataclasses", "collections",
    "enum", "numbers", "abc", "warnings",
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.cuda",
    "triton", "triton.language", "triton.language.extra", "triton.language.extra.libdevice",
    "triton.language.extra.cuda", "triton.language.extra.cuda.libdevice", "triton.language.math",
    "triton.runtime", "triton.testing",
}
"""Modules a candidate may import (a module is allowed if it or a parent listed here is, except torch/triton
internals below)."""

DENIED_PREFIXES = (
    "torch._", "torch.multiprocessing", "torch.utils", "torch.compiler", "torch.jit", "torch.fx",
    "torch.library", "torch.distributed", "torch.backends", "torch.profiler", "torch.autograd",
    "torch.hub", "torch.serialization", "torch.package",
    "triton.runtime.interpreter", "triton.runtime.driver", "triton.backends", "triton._C", "triton.knobs",
)

NAMED_IMPORT_RULES = {
    "threading": "threading", "_thread": "threading", "concurrent": "threading", "asyncio": "threading",
    "multiprocessing": "multiprocessing", "torch.multiprocessing": "multiprocessing",
    "subprocess": "subprocess", "ctypes": "ctypes", "cffi": "ctypes", "gc": "gc", "inspect": "inspect",
    "importlib": "importlib", "runpy": "importlib", "socket": "socket", "ssl": "socket", "http": "socket",
    "urllib": "socket", "requests": "socket", "ray": "socket", "grpc": "socket", "os": "os", "sys": "sys", "posix": "os", "signal": "os",
    "builtins": "builtins", "pickle": "serialization", "marshal": "serialization", "shutil": "filesystem",
    "pathlib": "filesystem", "io": "filesystem", "tempfile": "filesystem", "time": "time",
    "numpy": "host_compute", "cupy": "foreign_kernel", "jax": "foreign_kernel", "numba": "foreign_kernel",
}

FORBIDDEN_CALLS = {
    "exec": "exec_eval", "eval": "exec_eval", "compile": "exec_eval", "__import__": "importlib",
    "globals": "introspection", "locals": "introspection", "vars": "introspection",
    "breakpoint": "introspection", "open": "filesystem", "setattr": "dynamic_attribute",
    "delattr": "dynamic_attribute", "input": "introspection",
}

FORBIDDEN_ATTRIBUTES = {
    "__globals__", "__code__", "__closure__", "__builtins__", "__subclasses__", "__bases__", "__mro__",
    "__dict__", "__class__", "__import__", "__loader__", "__spec__", "__getattribute__", "__reduce__",
    "__reduce_ex__", "__self__", "__func__", "__wrapped__", "__defaults__", "__kwdefaults__",
    "f_globals", "f_locals", "f_back", "f_code", "gi_frame", "cr_frame", "tb_frame", "tb_next",
    "_getframe", "_exit", "system", "popen", "fork", "environ", "getenv",
    "__torch_dispatch__", "__torch_function__",
}

MODULE_ALIASES = {"np": "host_compute"}
"""Names under which libraries re-export a forbidden module (torch.nn.functional.np is numpy)."""

ATTRIBUTE_RULES = {"numpy": "host_compute", "tofile": "filesystem", "from_file": "filesystem"}
"""Attributes that only serve to compute on the host or to touch files, whatever object they are read from."""

FILE_FUNCTIONS = {"torch.save", "torch.load", "torch.from_file"}

TORCH_COMPILE_NAMES = {"compile", "_dynamo", "_inductor", "jit", "compiler"}
STREAM_NAMES = {"Stream", "stream", "ExternalStream", "set_stream"}
PATCHABLE_ROOTS = {"torch", "triton", "time", "builtins", "math", "functools", "operator", "F", "nn", "tl"}


@dataclass(frozen=True)
class StaticViolation:
    rule: str
    line: int
    message: str

    def sentence(self) -> str:
        return f"line {self.line}: {self.message} (rule {self.rule})"


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _import_rule(module: str) -> str | None:
    if module in NAMED_IMPORT_RULES:
        return NAMED_IMPORT_RULES[module]
    root = module.split(".")[0]
    if module.startswith(DENIED_PREFIXES):
        return NAMED_IMPORT_RULES.get(module, "torch_internals" if root == "torch" else "triton_internals")
    if module in ALLOWED_IMPORTS:
        return None
    parent = module
    while "." in parent:
        parent = parent.rsplit(".", 1)[0]
        if parent in ALLOWED_IMPORTS and parent not in {"torch", "triton"}:
            return None
    return NAMED_IMPORT_RULES.get(root, "forbidden_import")


def _attribute_rule(path: str) -> str | None:
    """The rule for reaching `path` (a dotted name rooted at an imported module) through attributes:
    a forbidden module re-exported by an allowed one (torch.os, torch.nn.functional.importlib), or
    torch/triton internals (private names, torch.utils, ...), which an import of the same name would break."""
    parts = path.split(".")
    last = parts[-1]
    if len(parts) > 1 and last in NAMED_IMPORT_RULES:
        return NAMED_IMPORT_RULES[last]
    if len(parts) > 1 and last in MODULE_ALIASES:
        return MODULE_ALIASES[last]
    if parts[0] in ("torch", "triton"):
        if path.startswith(DENIED_PREFIXES):
            for i in range(len(parts), 1, -1):
                if ".".join(parts[:i]) in NAMED_IMPORT_RULES:
                    return NAMED_IMPORT_RULES[".".join(parts[:i])]
            return f"{parts[0]}_internals"
        if last.startswith("_") and not (last.startswith("__") and last.endswith("__")):
            return f"{parts[0]}_internals"
    return None


class _Checker(ast.NodeVisitor):
    def __init__(self, allow_streams: bool) -> None:
        self.allow_streams = allow_streams
        self.violations: list[StaticViolation] = []
        self.aliases: dict[str, str] = {}  # local name -> module it is bound to

    def flag(self, node: ast.AST, rule: str, message: str) -> None:
        self.violations.append(StaticViolation(rule, getattr(node, "lineno", 0), message))

    def _known_root(self, path: str) -> bool:
        """Whether a resolved dotted path starts at a module the candidate imported (or a patchable root)."""
        root = path.split(".")[0]
        return root in PATCHABLE_ROOTS or any(v.split(".")[0] == root for v in self.aliases.values())

    def _resolve(self, dotted: str | None) -> str | None:
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        base = self.aliases.get(head, head)
        return f"{base}.{rest}" if rest else base

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            rule = _import_rule(alias.name)
            if rule:
                self.flag(node, rule, f"imports {alias.name!r}, which candidates may not use")
            self.aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag(node, "forbidden_import", "uses a relative import")
            return
        module = node.module or ""
        rule = _import_rule(module)
        if rule:
            self.flag(node, rule, f"imports from {module!r}, which candidates may not use")
        for alias in node.names:
            full = f"{module}.{alias.name}"
            sub_rule = _import_rule(full) if full.startswith(DENIED_PREFIXES) or full in NAMED_IMPORT_RULES else None
            if sub_rule and not rule:
                self.flag(node, sub_rule, f"imports {full!r}, which candidates may not use")
            if module == "torch" and alias.name in TORCH_COMPILE_NAMES:
                self.flag(node, "torch_compile", f"imports torch.{alias.name}")
            self.aliases[alias.asname or alias.name] = full
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            name = node.func.id
            self.flag(node, FORBIDDEN_CALLS[name], f"calls {name}()")
        if isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2:
            attr = node.args[1]
            if not (isinstance(attr, ast.Constant) and isinstance(attr.value, str)):
                self.flag(node, "dynamic_attribute", "calls getattr() with a computed attribute name")
            elif attr.value in FORBIDDEN_ATTRIBUTES:
                self.flag(node, "forbidden_attribute", f"reads attribute {attr.value!r} through getattr()")
            else:
                # getattr(torch.cuda, "Stream") is torch.cuda.Stream: judge the path it names
                base = self._resolve(_dotted(node.args[0]))
                if base and self._known_root(base):
                    path = f"{base}.{attr.value}"
                    rule = _attribute_rule(path)
                    if rule and not _attribute_rule(base):
                        self.flag(node, rule, f"reaches {path} through getattr(), which candidates may not use")
                    self._judge_path(node, path, "reaches")
        target = self._resolve(_dotted(node.func))
        if target:
            self._judge_path(node, target, "calls")
        self.generic_visit(node)

    def _judge_path(self, node: ast.AST, target: str, verb: str) -> None:
        parts = target.split(".")
        if target in FILE_FUNCTIONS:
            self.flag(node, "filesystem", f"{verb} {target}(), which reads or writes files")
        if parts[0] == "torch" and len(parts) > 1 and parts[1] in TORCH_COMPILE_NAMES:
            self.flag(node, "torch_compile", f"{verb} {target}")
        if not self.allow_streams and parts[0] == "torch" and parts[-1] in STREAM_NAMES:
            self.flag(node, "stream_creation", f"creates or switches CUDA streams ({target})")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        # Inner attributes first, so `torch.os.fork` reports the module it reaches before the call.
        self.generic_visit(node)
        dotted = _dotted(node)
        if dotted and dotted.split(".")[0] in self.aliases:
            path = self._resolve(dotted) or dotted
            rule = _attribute_rule(path)
            if rule and not _attribute_rule(path.rsplit(".", 1)[0]):
                self.flag(node, rule, f"reaches {path} through attributes, which candidates may not use")
        if node.attr in FORBIDDEN_ATTRIBUTES:
            self.flag(node, "forbidden_attribute", f"uses attribute {node.attr!r}")
        elif node.attr == "modules" and (_dotted(node.value) or "").split(".")[-1] == "sys":
            self.flag(node, "forbidden_attribute", "uses sys.modules")
        elif node.attr in ATTRIBUTE_RULES:
            self.flag(node, ATTRIBUTE_RULES[node.attr], f"uses .{node.attr}")

    def _check_target(self, target: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_target(t)
            return
        if isinstance(target, ast.Attribute):
            root = _dotted(target)
            resolved = self._resolve(root)
            if resolved and (resolved.split(".")[0] in PATCHABLE_ROOTS or root.split(".")[0] in self.aliases):
                head = root.split(".")[0]
                if head != "self":
                    self.flag(target, "module_patching", f"assigns to {root}, an attribute of an imported module")

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._check_target(t)
        # `ev = torch.cuda.Event` makes `ev` a name for that module attribute: `ev.elapsed_time = f` then
        # patches torch, and `ev.x` is judged as torch.cuda.Event.x
        value = self._resolve(_dotted(node.value))
        for t in node.targets:
            if isinstance(t, ast.Name):
                if value and self._known_root(value):
                    self.aliases[t.id] = value
                else:
                    self.aliases.pop(t.id, None)  # rebound to something that is not a module path
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            name = self._resolve(_dotted(base)) or ""
            if name.split(".")[-1] in {"Tensor", "TorchDispatchMode", "TorchFunctionMode"} or name.endswith("Parameter"):
                self.flag(node, "tensor_subclass", f"class {node.name} subclasses {name}")
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name in {"__torch_dispatch__", "__torch_function__"}:
                self.flag(item, "tensor_subclass", f"defines {item.name}")
        self.generic_visit(node)


def check_source(source: str, *, allow_streams: bool = False) -> list[StaticViolation]:
    """All rule violations in a candidate's source, in source order. Raises SyntaxError if it does not parse."""
    tree = ast.parse(source)
    checker = _Checker(allow_streams)
    checker.visit(tree)
    return sorted(checker.violations, key=lambda v: v.line)
