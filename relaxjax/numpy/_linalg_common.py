"""What the ``linalg`` functions share: NumPy's result dtype rule, the shape checks and
their error type."""
from __future__ import annotations

import numpy as _np

from ..errors import InconclusiveDimensionError, ShapeError
from ..shapes import dim_str, wrap_dim
from ..structs import ShapeDtypeStruct
from ._base import dtype_of, env, shape

LinAlgError = _np.linalg.LinAlgError
_F64 = _np.dtype("float64")


class LinAlgShapeError(ShapeError, LinAlgError):
    """An argument's shape does not fit the function (a non-square matrix, ...)."""


def _result_dtype(fname: str, *xs) -> _np.dtype:
    """NumPy's ``_commonType``: float32 only when every operand is float32."""
    out = _np.dtype("float32")
    for x in xs:
        d = dtype_of(x)
        if d.kind == "c":
            raise TypeError(f"linalg.{fname}: complex arrays are not supported")
        if d.kind == "f" and d.itemsize == 2:
            raise TypeError(f"linalg.{fname}: array type {d.name} is unsupported in linalg")
        if d != _np.dtype("float32"):
            out = _F64
    return out


def _at_least_2d(x, fname: str, argname: str) -> None:
    nd = len(shape(x))
    if nd < 2:
        raise LinAlgShapeError(f"linalg.{fname}: argument {argname} is {nd}-dimensional; it must "
                               f"be at least two-dimensional (..., m, n)")


def _square(x, fname: str, argname: str) -> None:
    _at_least_2d(x, fname, argname)
    s = shape(x)
    try:
        env().require_eq(s[-2], s[-1], f"linalg.{fname}: argument {argname} of shape {_fmt(s)} "
                                       f"must be square in its last two dims (..., n, n)")
    except InconclusiveDimensionError:
        raise
    except ShapeError as e:
        raise LinAlgShapeError(str(e)) from None


def _fmt(s) -> str:
    return "(" + ", ".join(dim_str(d) for d in s) + ")"


def _struct(dims):
    return ShapeDtypeStruct(tuple(wrap_dim(d) for d in dims), _F64)
