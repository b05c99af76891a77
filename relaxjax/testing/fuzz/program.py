"""Fuzzing programs as data: dims with bounds, input structs and :class:`Op` records, printed
as (and run from) Python source over ``xp`` = ``numpy`` or ``relaxjax.numpy``."""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from ...shapes import INF, SymbolicDim, dim_str, symbol
from ...structs import ShapeDtypeStruct


LIMIT = 1e4               # magnitudes past this get squashed
DIM_NAMES = ("n0", "n1", "n2")


@dataclass
class Op:
    """One binding: ``out = template.format(*names of args)``."""
    kind: str
    args: tuple
    template: str
    shape: tuple = ()           # symbolic shape of the result (for the printed comment)
    dtype: str = ""


@dataclass
class Program:
    dims: list                  # [(name, lo, hi)]
    inputs: list                # [(shape tuple of Dim, dtype str)]
    ops: list = field(default_factory=list)
    outputs: list = field(default_factory=list)     # value indices
    max_side: int = 8

    def names(self) -> list:
        return [f"x{i}" for i in range(len(self.inputs))] + [f"v{i}" for i in range(len(self.ops))]

    def signature(self):
        return tuple(ShapeDtypeStruct(tuple(_user_dim(d, self.bounds()) for d in shp), dt)
                     for shp, dt in self.inputs)

    def bounds(self) -> dict:
        return dim_bounds(self.dims)

    def body(self) -> str:
        names = self.names()
        k = len(self.inputs)
        args = ", ".join(names[:k])
        L = [f"def program(xp, {args}):"]
        for i, op in enumerate(self.ops):
            L.append(f"    {names[k + i]} = {op.template.format(*[names[a] for a in op.args])}"
                     f"  # {_type_str(op.dtype, op.shape)}")
        outs = ", ".join(names[o] for o in self.outputs)
        L.append(f"    return ({outs},)" if len(self.outputs) == 1 else f"    return ({outs})")
        return "\n".join(L)

    def signature_source(self) -> str:
        L = []
        for n, lo, hi in self.dims:
            L.append(f"{n} = rj.dim({n!r}, min={lo}" + (f", max={hi})" if hi != INF else ")"))
        structs = ", ".join(f"rj.ShapeDtypeStruct(({''.join(dim_str(d) + ', ' for d in shp)}), {dt!r})"
                            for shp, dt in self.inputs)
        L.append(f"SIGNATURE = ({structs},)")
        return "\n".join(L)

    def compile(self):
        ns: dict = {}
        exec(compile(self.body(), "<relaxjax fuzz program>", "exec"), ns)  # noqa: S102 (generated)
        return ns["program"]

    def __str__(self) -> str:
        return self.signature_source() + "\n\n" + self.body()


def dim_bounds(dims: list) -> dict:
    """``{symbol: (lo, hi)}`` for dims ``[(name, lo, hi)]``."""
    return {symbol(n): (lo, hi) for n, lo, hi in dims}


def _type_str(dtype, shape) -> str:
    return f"{dtype}[{', '.join(dim_str(d) for d in shape)}]"


def _user_dim(d, bounds):
    if isinstance(d, int):
        return d
    return SymbolicDim(d, {s: bounds[s] for s in d.free_symbols})


def same_dim(a, b) -> bool:
    """Two dims (ints or sympy expressions) are provably equal."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return sympy.expand(sympy.sympify(a) - b) == 0


def same_shape(a: tuple, b: tuple) -> bool:
    """Two shapes are provably equal, dim by dim."""
    return len(a) == len(b) and all(same_dim(x, y) for x, y in zip(a, b))


def used_dims(dims: list, inputs: list) -> list:
    """The dims ``(name, lo, hi)`` that some input's shape mentions (no argument could bind
    the others)."""
    used = set()
    for shp, _ in inputs:
        for d in shp:
            used |= getattr(d, "free_symbols", set())
    return [(n, lo, hi) for n, lo, hi in dims if symbol(n) in used]
