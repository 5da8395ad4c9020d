"""Static pre-filter: cheap AST rules that reject obviously hostile candidates before anything runs.

It is the first line, never the only one: aliasing evades any syntax check, so the run-time guards in
the worker decide. Each rule has a stable name that the verdict carries (`EvalResult.rule`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from . import pyast

ALLOWED_IMPORTS = {
    "__future__", "math", "typing", "functools", "itertools", "operator", "dataclasses", "collections",
    "enum", "numbers", "abc", "warnings",
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.cuda",
    "triton", "triton.language", "triton.language.extra", "triton.language.extra.libdevice",
    "triton.language.extra.cuda", "triton.language.extra.cuda.libdevice", "triton.language.math",
    "triton.runtime", "triton.testing", "triton.tools.tensor_descriptor",
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


ATTRIBUTE_GETTERS = {"operator.attrgetter", "operator.methodcaller"}
"""Callables that read an attribute named by a string (`attrgetter("a.b")(obj)` is `obj.a.b`)."""

VALUE_USE_RULES = {**FORBIDDEN_CALLS, "getattr": "dynamic_attribute"}
"""Builtins judged when the function itself is handed on (`partial(getattr, torch, name)`, `partial(open, path)`
given to a decorator, `map(setattr, ...)`): a use as a value is judged like the call it stands for, unless the
source binds the name itself (a parameter called `input`)."""


def _const_str(node: ast.AST | None) -> str | None:
    """The value of a string the source spells out: a literal, `+` of such strings, an f-string of them, or
    `"sep".join([...])` of them. None for anything computed at run time."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _const_str(node.left), _const_str(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                if value.conversion != -1 or value.format_spec is not None:
                    return None
                value = value.value
            text = _const_str(value)
            if text is None:
                return None
            parts.append(text)
        return "".join(parts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join" \
            and len(node.args) == 1 and not node.keywords and isinstance(node.args[0], (ast.List, ast.Tuple)):
        sep = _const_str(node.func.value)
        items = [_const_str(e) for e in node.args[0].elts]
        if sep is not None and all(i is not None for i in items):
            return sep.join(items)  # type: ignore[arg-type]
    return None


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
    def __init__(self, allow_streams: bool, bound: set[str] | None = None) -> None:
        self.allow_streams = allow_streams
        self.violations: list[StaticViolation] = []
        self.aliases: dict[str, str] = {}  # local name -> module it is bound to
        self.getters: dict[str, list[str]] = {}  # local name -> the attribute names of an attrgetter bound to it
        self.called: set[int] = set()  # ids of the expressions in a call's function position
        self.bound = bound or set()  # every name the source binds (a parameter called `input` is no builtin)
        self.tickets: list[set[str]] = []  # per enclosing function: the names bound to a ticket (`_ticket_names`)
        self.ticket_waits: list[int] = []  # lines of spin loops allowed because their function takes a ticket
        self.functions: list[str] = []  # the enclosing functions' names, innermost last
        self.waiting: list[str] = []  # the functions those loops are in
        self.defined: list[str] = []  # every function name the source defines, as often as it does

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
        self.called.add(id(node.func))
        if isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            name = node.func.id
            self.flag(node, FORBIDDEN_CALLS[name], f"calls {name}()")
        func = self._resolve(_dotted(node.func))
        if func == "getattr" and len(node.args) >= 2:
            self._judge_named(node, node.args[0], node.args[1], "getattr()")
        elif func in ATTRIBUTE_GETTERS:
            self._judge_getter(node, func, node.args)
        elif isinstance(node.func, ast.Call) and self._resolve(_dotted(node.func.func)) in ATTRIBUTE_GETTERS:
            # attrgetter("a.b")(obj): the strings are judged from obj (the getter itself, in its own visit)
            getter = self._resolve(_dotted(node.func.func))
            if node.args:
                for text in self._getter_names(getter, node.func.args):
                    self._judge_reach(node, node.args[0], text, f"{getter.rsplit('.', 1)[1]}()")
        elif isinstance(node.func, ast.Name) and node.func.id in self.getters and node.args:
            for text in self.getters[node.func.id]:
                self._judge_reach(node, node.args[0], text, "attrgetter()")
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "__getattribute__" and node.args:
            # obj.__getattribute__("name") or type.__getattribute__(obj, "name")
            obj, name = (node.func.value, node.args[0]) if len(node.args) == 1 else (node.args[0], node.args[1])
            self._judge_named(node, obj, name, "__getattribute__()")
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args \
                and self._namespace_of(node.func.value) is not None:
            self._judge_named(node, self._namespace_of(node.func.value), node.args[0], "a namespace's get()")
        if func:
            self._judge_path(node, func, "calls")
        self.generic_visit(node)

    def _getter_names(self, getter: str, args: list[ast.expr]) -> list[str]:
        """The attribute names an attrgetter/methodcaller reads (methodcaller: its first argument only)."""
        texts = [_const_str(a) for a in (args[:1] if getter.endswith("methodcaller") else args)]
        return [t for t in texts if t is not None]

    def _judge_getter(self, node: ast.Call, getter: str, args: list[ast.expr]) -> None:
        """attrgetter/methodcaller: every name must be spelled out; names that are forbidden whatever object
        they are read from (`__globals__`, `os`, `numpy`) are judged here, the rest once the object is known."""
        short = getter.rsplit(".", 1)[1]
        named = args[:1] if short == "methodcaller" else args
        if not named or any(_const_str(a) is None for a in named) or node.keywords and short == "attrgetter":
            self.flag(node, "dynamic_attribute", f"calls {short}() with a computed attribute name")
            return
        for text in self._getter_names(getter, args):
            parts = text.split(".")
            for i, part in enumerate(parts):
                if part in FORBIDDEN_ATTRIBUTES:
                    self.flag(node, "forbidden_attribute", f"reads attribute {part!r} through {short}()")
                elif part in ATTRIBUTE_RULES:
                    self.flag(node, ATTRIBUTE_RULES[part], f"uses .{part} through {short}()")
                elif i and (part in NAMED_IMPORT_RULES or part in MODULE_ALIASES):
                    rule = NAMED_IMPORT_RULES.get(part) or MODULE_ALIASES[part]
                    self.flag(node, rule, f"reaches module {part!r} through {short}()")

    def _namespace_of(self, node: ast.AST) -> ast.AST | None:
        """For `vars(obj)` or `obj.__dict__` (a module's or class's namespace), the `obj`."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars" \
                and len(node.args) == 1:
            return node.args[0]
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            return node.value
        return None

    def visit_Subscript(self, node: ast.Subscript) -> None:
        # vars(torch._C)["_DisableTorchDispatch"], torch.__dict__["_C"]: an attribute read by its name
        obj = self._namespace_of(node.value)
        if obj is not None and isinstance(node.ctx, ast.Load):
            self._judge_named(node, obj, node.slice, "a namespace lookup")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and node.id in VALUE_USE_RULES and id(node) not in self.called \
                and node.id not in self.bound and node.id not in self.aliases:
            self.flag(node, VALUE_USE_RULES[node.id], f"hands {node.id} on as a value (the names it will get "
                                                      "cannot be read)")

    def _judge_named(self, node: ast.AST, obj: ast.AST, name: ast.AST, how: str) -> None:
        """An attribute of `obj` read by the string `name`: judged as `obj.<name>` would be."""
        text = _const_str(name)
        if text is None:
            self.flag(node, "dynamic_attribute", f"reads an attribute with a computed name through {how}")
            return
        if text in FORBIDDEN_ATTRIBUTES:
            self.flag(node, "forbidden_attribute", f"reads attribute {text!r} through {how}")
            return
        if text in ATTRIBUTE_RULES:
            self.flag(node, ATTRIBUTE_RULES[text], f"uses .{text} through {how}")
        self._judge_reach(node, obj, text, how)

    def _judge_reach(self, node: ast.AST, obj: ast.AST, text: str, how: str) -> None:
        """`obj` followed by the dotted attribute names `text`, judged by the rules of a written-out path
        (`getattr(torch.cuda, "Stream")` is torch.cuda.Stream; `getattr(torch, "_" + "C")` is torch._C)."""
        base = self._expr_path(obj)
        if not base or not self._known_root(base):
            return
        path = base
        for part in text.split("."):
            parent, path = path, f"{path}.{part}"
            rule = _attribute_rule(path)
            if rule and not _attribute_rule(parent):
                self.flag(node, rule, f"reaches {path} through {how}, which candidates may not use")
        self._judge_path(node, path, "reaches")

    def _expr_path(self, node: ast.AST) -> str | None:
        """The dotted path an expression names, through aliases and attribute reads by constant strings
        (`getattr(getattr(torch, "utils"), "_python_dispatch")` is torch.utils._python_dispatch)."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self._expr_path(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):
            func = self._resolve(_dotted(node.func))
            if func == "getattr" and len(node.args) >= 2:
                base, text = self._expr_path(node.args[0]), _const_str(node.args[1])
                return f"{base}.{text}" if base and text is not None else None
            if isinstance(node.func, ast.Call) and self._resolve(_dotted(node.func.func)) == "operator.attrgetter" \
                    and len(node.func.args) == 1 and node.args:
                base, text = self._expr_path(node.args[0]), _const_str(node.func.args[0])
                return f"{base}.{text}" if base and text is not None else None
        if isinstance(node, ast.Subscript):
            obj = self._namespace_of(node.value)
            if obj is not None:
                base, text = self._expr_path(obj), _const_str(node.slice)
                return f"{base}.{text}" if base and text is not None else None
        return None

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
        path = None
        if dotted and dotted.split(".")[0] in self.aliases:
            path = self._resolve(dotted) or dotted
        elif dotted is None:
            # getattr(torch, "utils")._python_dispatch: the read after a constant getattr is a path too
            path = self._expr_path(node)
            path = path if path and self._known_root(path) else None
        if path:
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
        value = self._expr_path(node.value) if isinstance(node.value, (ast.Call, ast.Subscript)) \
            else self._resolve(_dotted(node.value))
        getter = isinstance(node.value, ast.Call) \
            and self._resolve(_dotted(node.value.func)) in ATTRIBUTE_GETTERS
        for t in node.targets:
            if isinstance(t, ast.Name):
                if value and self._known_root(value):
                    self.aliases[t.id] = value
                else:
                    self.aliases.pop(t.id, None)  # rebound to something that is not a module path
                if getter:  # `get = attrgetter("_C")`: `get(torch)` is judged as torch._C
                    func = self._resolve(_dotted(node.value.func))  # type: ignore[union-attr]
                    self.getters[t.id] = self._getter_names(func, node.value.args)  # type: ignore[union-attr]
                else:
                    self.getters.pop(t.id, None)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.tickets.append(_ticket_names(node))
        self.functions.append(node.name)
        self.defined.append(node.name)
        self.generic_visit(node)
        self.functions.pop()
        self.tickets.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_While(self, node: ast.While) -> None:
        """A loop that spins until a value other programs write arrives. Programs of one launch are not
        guaranteed to be resident together, so a kernel whose programs wait on programs that may not have started
        hangs where they are not (a larger grid, another kernel on the GPU). The one safe form: a program claims
        its work item with a ticket (`t = tl.atomic_add(counter, 1)`) and waits only on items claimed before it,
        whose programs are already running (decoupled look-back). So a spin loop in a function that takes a
        ticket is recorded (`ticket_waits`) for the ordering check, which runs the kernel with programs one at a
        time in both orders; any other spin loop is rule `inter_program_wait`. A spin loop: its condition, or a
        name the condition reads that the loop's body assigns, comes from a volatile load or from an atomic that
        only reads (an add, or, xor or max of 0; a compare-and-swap writing back what it compares). A lock
        (`atomic_cas(lock, 0, 1)`, released by the same program) and a work counter are not waits."""
        reads = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
        sources: list[ast.AST] = [node.test]
        for stmt in node.body:
            for sub in ast.walk(stmt):
                targets = (sub.targets if isinstance(sub, ast.Assign) else
                           [sub.target] if isinstance(sub, (ast.AugAssign, ast.AnnAssign)) else [])
                if any(isinstance(n, ast.Name) and n.id in reads for t in targets for n in ast.walk(t)):
                    sources.append(sub)
        for src in sources:
            for call in ast.walk(src):
                if isinstance(call, ast.Call) and _waits_on_memory(call):
                    if self.tickets and self.tickets[-1]:
                        # a program that took a ticket may wait on work items claimed before it (decoupled
                        # look-back); that it waits on nothing else is checked by running it, programs one at a
                        # time in both orders (`Evaluator._ordering_check`), not here
                        self.ticket_waits.append(node.lineno)
                        self.waiting.append(self.functions[-1])
                    else:
                        self.flag(node, "inter_program_wait",
                                  "a loop waits on a value other programs write (a spin on a volatile load or a "
                                  "reading atomic) and its kernel takes no ticket: programs of one launch may wait "
                                  "only on work items claimed before their own ticket (`tl.atomic_add(counter, 1)`)")
                    self.generic_visit(node)
                    return
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
    return _checked(source, allow_streams).violations


@dataclass(frozen=True)
class TicketWaits:
    """The spin loops `check_source` let through because their kernel takes a ticket: a candidate with any must
    pass the ordering check (`Evaluator._ordering_check`) before it is judged."""

    lines: list[int]
    """each loop's line"""
    kernels: list[str]
    """the functions holding them"""
    twins: list[str]
    """those of `kernels` the source defines more than once (a launch is known by its kernel's name, so the
    ordering check cannot tell such twins apart)"""


def ticket_wait_report(source: str) -> TicketWaits:
    """The source's ticket waits, from one pass of the checker. Raises SyntaxError if it does not parse."""
    checker = _checked(source, False)
    names = list(dict.fromkeys(checker.waiting))
    return TicketWaits(checker.ticket_waits, names, [n for n in names if checker.defined.count(n) > 1])


def ticket_waits(source: str) -> list[int]:
    """The lines of the source's ticket waits (`ticket_wait_report`)."""
    return ticket_wait_report(source).lines


def waiting_kernels(source: str) -> tuple[list[str], list[str]]:
    """The functions holding the source's ticket waits, and those defined twice (`ticket_wait_report`)."""
    report = ticket_wait_report(source)
    return report.kernels, report.twins


def _checked(source: str, allow_streams: bool) -> _Checker:
    tree = pyast.parse(source)
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    bound |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments)
              for a in (*n.posonlyargs, *n.args, *n.kwonlyargs, *(x for x in (n.vararg, n.kwarg) if x))}
    bound |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    checker = _Checker(allow_streams, bound)
    checker.visit(tree)
    # one report per rule, line, message
    checker.violations = sorted(dict.fromkeys(checker.violations), key=lambda v: v.line)
    return checker


def _ticket_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The names a function binds to a ticket: `t = tl.atomic_add(counter, 1)` (any atomic add of the literal
    1 whose old value is kept), the work index of a program that claims its work in the order it started.
    Nested functions are their own scope and not looked into."""
    names: set[str] = set()
    todo: list[ast.AST] = list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _is_ticket(node.value):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        todo.extend(ast.iter_child_nodes(node))
    return names


def _is_ticket(call: ast.Call) -> bool:
    name = call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id if isinstance(call.func, ast.Name) else ""
    if name != "atomic_add":
        return False
    val = call.args[1] if len(call.args) > 1 else {k.arg: k.value for k in call.keywords if k.arg}.get("val")
    return isinstance(val, ast.Constant) and not isinstance(val.value, bool) and val.value == 1


_READING_ATOMICS = {"atomic_add", "atomic_or", "atomic_xor", "atomic_max", "atomic_umax"}


def _is_zero(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and not isinstance(node.value, bool) and node.value == 0


def _waits_on_memory(call: ast.Call) -> bool:
    """Whether a call reads memory other programs write, as a spin-wait does: a load with `volatile=True`, an
    atomic that changes nothing (add/or/xor/max of 0), or a compare-and-swap whose new value is its compare
    value (a read)."""
    name = call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id if isinstance(call.func, ast.Name) else ""
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    if name == "load" and isinstance(kw.get("volatile"), ast.Constant) and kw["volatile"].value is True:
        return True
    if name in _READING_ATOMICS:
        val = call.args[1] if len(call.args) > 1 else kw.get("val")
        return _is_zero(val)
    if name == "atomic_cas":
        cmp = call.args[1] if len(call.args) > 1 else kw.get("cmp")
        val = call.args[2] if len(call.args) > 2 else kw.get("val")
        return cmp is not None and val is not None and ast.dump(cmp) == ast.dump(val)
    return False
