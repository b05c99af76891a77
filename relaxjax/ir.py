"""The graph-level IR: a module of functions of straight-line bindings.

Every value carries its struct info (:class:`TensorType`: dtype + symbolic shape).  A binding
calls one of three kinds of callee, side by side (the cross-level IR of the Relax paper):

* a graph :class:`~relaxjax.core.Primitive` (``add``, ``matmul``, ...);
* a loop-level tensor program (``call_tir``): a callee with ``call_kind == "tir"``;
* an external library function (``call_library``): a callee with ``call_kind == "library"``.

Structured control flow (``while_loop``, ``fori_loop``, ``scan``, ``cond``) is a primitive
binding whose ``params`` hold *regions*: nested :class:`IRModule` s (the loop body, the
branches) that passes transform like any module (:func:`map_regions`) and every backend
compiles and runs as a module of its own.  The printer shows them inline, indented.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence, Union

import numpy as np
import sympy

from . import dtypes as dt
from .shapes import Dim, Guard, dim_str, free_symbols, is_symbolic, INF


@dataclass(frozen=True)
class TensorType:
    """Struct info of a value: symbolic shape, dtype, and NEP 50 weakness (Python scalars)."""
    shape: tuple
    dtype: np.dtype
    weak: bool = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return f"{dt.short_name(self.dtype)}[{', '.join(dim_str(d) for d in self.shape)}]"

    def free_symbols(self) -> frozenset:
        out: frozenset = frozenset()
        for d in self.shape:
            out |= free_symbols(d)
        return out

    def substitute(self, subst: dict) -> "TensorType":
        if not subst:
            return self
        from .shapes import normalize
        shape = tuple(normalize(d.xreplace(subst)) if is_symbolic(d) else d for d in self.shape)
        return TensorType(shape, self.dtype, self.weak)


class Var:
    """A value defined once (a parameter or a binding output).  Identity is the name."""
    __slots__ = ("type", "hint")

    def __init__(self, type: TensorType, hint: str | None = None):
        self.type = type
        self.hint = hint

    def __repr__(self) -> str:
        return f"Var({self.hint or hex(id(self))}: {self.type})"


@dataclass(frozen=True, eq=False)
class Literal:
    """A constant operand: a scalar, a symbolic dim used as a value, or a NumPy array."""
    value: Any
    type: TensorType

    def text(self) -> str:
        v = self.value
        if is_symbolic(v):
            return dim_str(v)
        if isinstance(v, np.ndarray) and v.ndim > 0:
            if v.size <= 6:
                return f"{dt.short_name(v.dtype)}{v.tolist()}"
            return f"const({self.type})"
        return str(np.asarray(v)[()])     # NumPy's shortest round-trip text for the dtype


Atom = Union[Var, Literal]


@dataclass(eq=False)
class Binding:
    """``outvars = callee(*args, **params)``; ``source`` is the user's file:line."""
    outvars: list
    callee: Any
    args: list
    params: dict = field(default_factory=dict)
    source: str | None = None

    @property
    def kind(self) -> str:
        """"primitive", "tir" or "library": which of the three kinds of call this is."""
        return getattr(self.callee, "call_kind", "primitive")


@dataclass(eq=False)
class Function:
    """A graph function: typed parameters, bindings, results.

    ``dim_vars`` are bound from the parameters' shapes when the function is called;
    data-dependent bindings (``nonzero``, ``match_cast``) bind further dims as they run.
    ``bounds`` and ``guards`` are the constraints the function was traced under.
    """
    name: str
    params: list
    param_names: list
    bindings: list
    results: list
    bounds: dict = field(default_factory=dict)
    guards: list = field(default_factory=list)
    attrs: dict = field(default_factory=dict)

    # A Function is also a callee: ``FuseOps`` groups bindings into sub-functions with
    # ``attrs["primitive"]`` set, called from the entry like any other op.
    call_kind = "function"

    @property
    def dim_vars(self) -> list:
        seen: dict = {}
        for p in self.params:
            for d in p.type.shape:
                for s in sorted(free_symbols(d), key=lambda s: s.name):
                    seen.setdefault(s, None)
        return list(seen)

    def vars(self) -> Iterator[Var]:
        yield from self.params
        for b in self.bindings:
            yield from b.outvars

    def uses(self) -> dict:
        """Var -> the positions of the bindings reading it, once per argument it is
        (``len(bindings)`` for each time it is a result)."""
        uses: dict = {}
        for i, b in enumerate(self.bindings):
            for a in b.args:
                if isinstance(a, Var):
                    uses.setdefault(a, []).append(i)
        for r in self.results:
            if isinstance(r, Var):
                uses.setdefault(r, []).append(len(self.bindings))
        return uses

    def __str__(self) -> str:
        return print_function(self)


@dataclass(eq=False)
class IRModule:
    """Functions by name; ``entry`` is the one a jitted function calls."""
    functions: dict
    entry: str

    @property
    def main(self) -> Function:
        return self.functions[self.entry]

    def with_function(self, fn: Function) -> "IRModule":
        return IRModule({**self.functions, fn.name: fn}, self.entry)

    def __str__(self) -> str:
        return "\n\n".join(str(f) if isinstance(f, Function) else f.text()
                           for f in self.functions.values())

    as_text = __str__


# ---------------------------------------------------------------------------------------
# Printer
# ---------------------------------------------------------------------------------------

def _names() -> Iterator[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    for c in letters:
        yield c
    i = 0
    while True:
        for c in letters:
            yield f"{c}{i}"
        i += 1


def format_param(v: Any) -> str:
    if isinstance(v, (int, sympy.Basic)) and not isinstance(v, bool):
        return dim_str(v)
    if isinstance(v, np.dtype):
        return dt.short_name(v)
    if isinstance(v, tuple):
        inner = ", ".join(format_param(x) for x in v)
        return f"({inner}{',' if len(v) == 1 else ''})"
    if isinstance(v, list):
        return "[" + ", ".join(format_param(x) for x in v) + "]"
    if isinstance(v, Function):
        return f"@{v.name}"
    if isinstance(v, IRModule):
        return f"@{v.entry}"
    return repr(v)


def regions(b: Binding) -> list:
    """The regions (nested modules) in a binding's params, in params order."""
    out = []
    for v in b.params.values():
        if isinstance(v, IRModule):
            out.append(v)
        elif isinstance(v, tuple):
            out.extend(x for x in v if isinstance(x, IRModule))
    return out


def map_regions(module: IRModule, f) -> IRModule:
    """``module`` with every region of every graph function replaced by ``f(region)``
    (regions nested in regions are ``f``'s business: it is usually a whole pass)."""
    fns, changed = {}, False
    for name, fn in module.functions.items():
        if not isinstance(fn, Function) or not any(regions(b) for b in fn.bindings):
            fns[name] = fn
            continue
        bindings = []
        for b in fn.bindings:
            if regions(b):
                params = {k: (f(v) if isinstance(v, IRModule) else
                              tuple(f(x) if isinstance(x, IRModule) else x for x in v)
                              if isinstance(v, tuple) else v) for k, v in b.params.items()}
                b = Binding(b.outvars, b.callee, b.args, params, b.source)
            bindings.append(b)
        fns[name] = Function(fn.name, fn.params, fn.param_names, bindings, fn.results, fn.bounds,
                             fn.guards, fn.attrs)
        changed = True
    return IRModule(fns, module.entry) if changed else module


def value_names(fn: Function) -> dict:
    """The names the printer gives the function's values: parameters by their own names,
    binding results a, b, c, ... skipping dim and parameter names."""
    reserved = {s.name for s in fn.dim_vars} | set(fn.param_names)
    for b in fn.bindings:
        for v in b.outvars:
            reserved |= {s.name for s in v.type.free_symbols()}
    gen = (n for n in _names() if n not in reserved)
    names = dict(zip(fn.params, fn.param_names))
    for b in fn.bindings:
        for v in b.outvars:
            names[v] = next(gen)
    return names


def ragged_type(values: Var, note: tuple, names: dict) -> str:
    """The ragged type of a ragged array's packed values ``(total, *inner)`` over offsets of
    ``batch + 1``: ``f32[batch, len[offsets], *inner]``, each sequence's length read from
    the offsets; a block's ``f32[batch, len[offsets], len[offsets], *inner]``."""
    offsets, kind = note
    batch = dim_str(offsets.type.shape[0] - 1)
    length = f"len[{names[offsets]}]"
    ragged = [length, length] if kind == "block" else [length]
    inner = [dim_str(d) for d in values.type.shape[1:]]
    return f"ragged {dt.short_name(values.type.dtype)}[{', '.join([batch, *ragged, *inner])}]"


def print_function(fn: Function) -> str:
    names = value_names(fn)

    def atom(a) -> str:
        if isinstance(a, Var):
            if a not in names:
                return f"<undefined {a!r}>"
            return names[a]
        return a.text()

    def rtype(a) -> str:
        if isinstance(a, Literal) and is_symbolic(a.value) or (
                isinstance(a, Literal) and isinstance(a.value, int) and a.type.weak):
            return "int"
        return str(a.type)

    ragged = fn.attrs.get("ragged", {})

    def note(v) -> str:       # a ragged array's packed values: their ragged type
        return f"  # {ragged_type(v, ragged[v], names)}" if v in ragged and ragged[v][0] in names else ""
    params = ", ".join(f"{n}: {p.type}" for p, n in zip(fn.params, fn.param_names))
    rtypes = [rtype(r) for r in fn.results]
    ret = rtypes[0] if len(rtypes) == 1 else "(" + ", ".join(rtypes) + ")"
    lines = [f"def {fn.name}({params}) -> {ret}:"]
    shown = {k: v for k, v in fn.attrs.items() if k != "ragged"}
    if shown:
        lines.append("  # " + ", ".join(f"{k}={v}" for k, v in sorted(shown.items())))
    lines += [f"  # {n}:{note(p)[3:]}" for p, n in zip(fn.params, fn.param_names) if note(p)]
    custom = {s: b for s, b in fn.bounds.items() if b != (1, INF)}
    if custom:
        lines.append("  # " + ", ".join(
            f"{s.name} in [{lo}, {'inf' if hi == INF else hi}]"
            for s, (lo, hi) in sorted(custom.items(), key=lambda kv: kv[0].name)))
    if fn.guards:
        lines.append("  # guards: " + ", ".join(str(g) for g in fn.guards))
    for b in fn.bindings:
        lhs = ", ".join(f"{names[v]}: {v.type}" for v in b.outvars)
        args = [atom(a) for a in b.args]
        args += [f"{k}={format_param(v)}" for k, v in b.params.items()]
        if b.kind == "tir":
            call = f"call_tir({b.callee.name}, {', '.join(args)})"
        elif b.kind == "library":
            call = f"call_library(\"{b.callee.name}\", {', '.join(args)})"
        elif b.kind == "function":
            call = f"@{b.callee.name}({', '.join(args)})"
        else:
            call = f"{b.callee.name}({', '.join(args)})"
        lines.append(f"  {lhs} = {call}" + "".join(note(v) for v in b.outvars))
        for r in regions(b):
            lines.extend("    " + line if line else "" for line in str(r).splitlines())
    lines.append("  return " + ", ".join(atom(r) for r in fn.results))
    return "\n".join(lines)
