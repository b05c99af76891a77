"""The kernel language's vocabulary: buffer annotations, ``grid`` and the scalar math names.

These are what a kernel's source refers to; the parser (``parser.py``) recognises them by
identity.  Called from plain Python they behave like their NumPy counterparts, so a kernel's
helpers stay usable outside kernels.
"""
from __future__ import annotations

import ast
import itertools
import keyword
import operator
from dataclasses import dataclass

import numpy as np
import sympy

from .. import dtypes as dt
from ..shapes import SymbolicDim, dim_str, floordiv, normalize, symbol


@dataclass(frozen=True)
class BufferSpec:
    """A kernel parameter's declared shape and dtype: each dim an int, a name, or an integer
    expression over names (a sympy expression: ``"2*n"``, ``"n+1"``, ``"n//2"``)."""
    shape: tuple
    dtype: np.dtype

    def __str__(self) -> str:
        return f"{dt.short_name(self.dtype)}[{', '.join(dim_text(d) for d in self.shape)}]"

    def dim_names(self) -> list:
        """The names the shape uses, in order of appearance."""
        out: list = []
        for d in self.shape:
            if isinstance(d, str):
                out.append(d)
            elif isinstance(d, sympy.Basic):
                out += sorted(s.name for s in d.free_symbols)
        return list(dict.fromkeys(out))

    def resolve(self, binding: dict) -> tuple:
        """The shape with every name replaced by its dim in ``binding`` (name -> dim)."""
        return tuple(resolve_dim(d, binding) for d in self.shape)


def resolve_dim(d, binding: dict):
    """A declared dim (int, name or expression over names) with the names replaced by their
    dims in ``binding``."""
    if isinstance(d, str):
        return binding[d]
    if isinstance(d, sympy.Basic):
        return normalize(sympy.expand(d.xreplace({symbol(n): v for n, v in binding.items()})))
    return d


def dim_text(d) -> str:
    return dim_str(d) if isinstance(d, sympy.Basic) else str(d)


# integer arithmetic a Buffer dim expression may use
_DIM_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
            ast.FloorDiv: floordiv}


def parse_dim(text: str):
    """``"2*n"``, ``"n + 1"``, ``"(n + 7) // 8"``: an integer expression over dim names, as a
    sympy expression (a bare name stays a string)."""
    if text.isidentifier():
        return text

    def conv(node):
        if isinstance(node, ast.Expression):
            return conv(node.body)
        if isinstance(node, ast.Name) and not keyword.iskeyword(node.id):
            return symbol(node.id)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return sympy.Integer(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _DIM_OPS:
            return _DIM_OPS[type(node.op)](conv(node.left), conv(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -conv(node.operand)
        raise TypeError(f"rj.Buffer dim {text!r}: only names, ints, +, -, * and // are allowed")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise TypeError(f"rj.Buffer dim {text!r} is not an expression over dim names") from None
    e = normalize(conv(tree))
    if isinstance(e, int) and e < 0:
        raise TypeError(f"rj.Buffer dim {text!r} is negative")
    return e


class Buffer:
    """``rj.Buffer[(dims...), dtype]``: the annotation of a kernel parameter.  Dims are names
    (``"n"``: every buffer axis named ``n`` has the same size, bound from the arguments),
    ints, or integer expressions over names (``"2*n"``, ``"n+1"``, ``"n//2"``, or a
    ``SymbolicDim`` like ``2 * rj.dim("n")``); ``rj.Buffer["n", "float32"]`` is
    one-dimensional, ``rj.Buffer[(), ...]`` a scalar."""

    def __class_getitem__(cls, item) -> BufferSpec:
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError("use rj.Buffer[(dims...), dtype], e.g. rj.Buffer[('n', 'm'), 'float32']")
        shape, dtype = item
        if not isinstance(shape, (tuple, list)):
            shape = (shape,)
        dims = []
        for d in shape:
            if isinstance(d, SymbolicDim):
                d = d.expr.name if d.expr.is_Symbol else d.expr
            if isinstance(d, (np.integer, int)) and not isinstance(d, bool) and int(d) >= 0:
                dims.append(int(d))
            elif isinstance(d, str):
                dims.append(parse_dim(d))
            elif isinstance(d, sympy.Basic):
                dims.append(d)
            else:
                raise TypeError(f"rj.Buffer dims are names, integer expressions over names or "
                                f"non-negative ints, got {d!r}")
        return BufferSpec(tuple(dims), dt.canonical(dtype))


def prange(*args):
    """``for i in rj.prange(n)`` (or ``(start, stop[, step])``): a ``range`` whose iterations
    the kernel's author says are independent, as numba's ``prange``: run in parallel where
    it is the outermost loop (and vectorized where it is the innermost) even when the loop
    level cannot prove it, e.g. stores to rows read from data (``out[off[s] + i]``).  A
    wrong claim is a data race."""
    return range(*args)


def grid(*extents):
    """``for i, j in rj.grid(n, m)``: the nested loops ``for i in range(n): for j in range(m)``."""
    return itertools.product(*(range(int(e)) for e in extents))


# dtype casts usable in kernels: rj.float32(v) (they are NumPy's scalar types)
CASTS = {np.dtype(t): t for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                                  np.uint16, np.uint32, np.uint64, np.float16, np.float32, np.float64)}
