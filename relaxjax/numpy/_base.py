"""Operand handling shared by the numpy layer: inspection, NEP 50 promotion, casts.

Operands are tracers, NumPy arrays/scalars, Python scalars (weak) and symbolic dims (weak
ints).  In eager mode (no tracer) everything is a NumPy array and primitives run their
reference implementation.
"""
from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from .. import dtypes as dt
from .. import lax
from ..core import Tracer, current_trace, find_trace
from ..ir import Literal, TensorType
from ..shapes import NumpyIntDim, ShapeEnv, SymbolicDim, current_env, wrap_dim

PyScalar = (bool, int, float, complex)


def is_python_scalar(x: Any) -> bool:
    """A Python bool, int, float or complex: weak under NEP 50.  NumPy scalars are strong,
    though ``np.float64`` subclasses ``float``."""
    return isinstance(x, PyScalar) and not isinstance(x, np.generic)


def env() -> ShapeEnv:
    """The active trace's shape environment, or a fresh one for eager (concrete) shapes."""
    return current_env() or ShapeEnv("explicit")


def is_weak(x: Any) -> bool:
    if isinstance(x, Tracer):
        return x.weak_type
    return is_python_scalar(x) or (isinstance(x, SymbolicDim) and not isinstance(x, NumpyIntDim))


def arr(x: Any) -> Any:
    """Anything array-like -> a Tracer or a NumPy array (Python scalars use NumPy defaults)."""
    if isinstance(x, Tracer):
        return x
    if hasattr(type(x), "__relaxjax_ufunc__"):     # applies elementwise functions itself (ragged)
        return x
    if isinstance(x, SymbolicDim):
        return dim_tracer(x, weak=not isinstance(x, NumpyIntDim))
    if isinstance(x, np.ndarray):
        dt.reject_masked(x)
        dt.canonical(x.dtype)
        return x
    a = np.asarray(x)
    if a.dtype == object:
        raise TypeError(f"cannot convert {type(x).__name__} to an array")
    dt.canonical(a.dtype)
    return a


def dim_tracer(d: SymbolicDim, dtype=np.dtype("int64"), weak=True) -> Tracer:
    ctx = current_trace()
    if ctx is None:
        raise TypeError(f"the symbolic dim {d} can only be used as a value inside a traced function")
    return Tracer(ctx, Literal(ctx.env.canon(d.expr), TensorType((), np.dtype(dtype), weak)))


def shape(x: Any) -> tuple:
    """Internal (int | sympy) shape."""
    if isinstance(x, Tracer):
        return x.type.shape
    return tuple(np.shape(x))


def ndim(x: Any) -> int:
    return len(shape(x))


def dtype_of(x: Any) -> np.dtype:
    if isinstance(x, Tracer):
        return x.dtype
    if isinstance(x, SymbolicDim):
        return np.dtype("int64")
    return np.asarray(x).dtype


def spec(x: Any):
    """What NumPy's promotion sees: a dtype, or a Python type for a weak operand."""
    if isinstance(x, Tracer):
        return dt.python_type_of(x.dtype) if x.weak_type else x.dtype
    if isinstance(x, SymbolicDim):
        return np.dtype("int64") if isinstance(x, NumpyIntDim) else int
    if is_python_scalar(x):
        return type(x)
    return np.asarray(x).dtype


def cast(x: Any, dtype: np.dtype, weak: bool = False) -> Any:
    """Convert an operand to ``dtype``; Python scalars raise OverflowError like NumPy."""
    dtype = np.dtype(dtype)
    if isinstance(x, Tracer):
        if x.dtype == dtype and (x.weak_type == weak or not weak):
            return x
        return lax.convert.bind(x, dtype=dtype, weak=weak)
    if isinstance(x, SymbolicDim):
        if current_trace() is None:
            raise TypeError(f"the symbolic dim {x} can only be used as a value inside a traced function")
        return dim_tracer(x, dtype, weak)
    if is_python_scalar(x):
        if isinstance(x, int) and dtype.kind in "iu":
            info = np.iinfo(dtype)
            if not info.min <= x <= info.max:
                raise OverflowError(f"Python integer {x} out of bounds for {dtype}")
        value = np.asarray(x, dtype)
        ctx = current_trace()
        if weak and ctx is not None:
            return Tracer(ctx, Literal(value, TensorType((), dtype, True)))
        return value
    a = np.asarray(x)
    return a if a.dtype == dtype else a.astype(dtype)


def promote(*xs: Any, ufunc: str | None = None) -> list:
    """Cast operands to the common dtype NumPy would choose (``np.result_type`` or a ufunc loop)."""
    specs = tuple(spec(x) for x in xs)
    if ufunc is not None:
        ins, _ = dt.resolve_ufunc(ufunc, specs)
    else:
        ins = (dt.result_type(*specs),) * len(xs)
    weak = all(is_weak(x) for x in xs)
    return [cast(x, d, weak) for x, d in zip(xs, ins)]


def user_shape(shape: tuple) -> tuple:
    """Internal shape -> what users see (ints and SymbolicDims)."""
    return tuple(wrap_dim(d) for d in shape)


def view(out: Any, base: Any) -> Any:
    """Mark ``out`` as a view of ``base`` (NumPy would share its memory): a write into ``out``
    while ``base`` is alive is refused (``Tracer.__setitem__``).  The same tracer (a no-op
    reshape) is ``base`` itself, which a write updates like NumPy's."""
    if isinstance(out, Tracer) and isinstance(base, Tracer) and out is not base:
        out.view_of = base.view_of + (weakref.ref(base),)
    return out


def fresh(out: Any, a: Any) -> Any:
    """``out``, or a new tracer for the same value when it is ``a`` itself: NumPy functions
    that copy (``astype``, ``array``, ``copy``) must not alias, or a write to the result
    (``x[i] = v`` rebinds the tracer) would show through ``a``."""
    if out is a and isinstance(a, Tracer):
        return Tracer(a.ctx, a.atom)
    if out is a and isinstance(a, np.ndarray):
        return a.copy()
    return out


def live_bases(x: Any) -> list:
    """The tracers ``x`` is a view of that are still alive."""
    if not isinstance(x, Tracer):
        return []
    return [b for b in (r() for r in x.view_of) if b is not None]


def bind_in_trace(prim, *args, **params):
    """``prim.bind``, recorded in the active trace even when no operand is traced: creation
    functions (``zeros(3)``, ``arange(5)``) inside ``@jit`` give traced arrays, which have
    ``.at`` and take ``x[i] = v`` (constant folding still folds what stays constant)."""
    ctx = current_trace()
    if ctx is not None and find_trace(args) is None:
        return ctx.emit(prim, args, params)
    return prim.bind(*args, **params)
