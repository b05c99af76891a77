"""Complex ``linalg.solve`` and ``linalg.inv`` through their real block form: a complex
system (Ar + i Ai)(xr + i xi) = br + i bi is the real system of twice the size

    [[Ar, -Ai], [Ai, Ar]] [xr; xi] = [br; bi],

exact, with the conditioning of the complex one (its singular values are the complex
matrix's, each twice), solved by the real library call ``linalg.solve``: nothing below the
numpy layer sees a complex matrix.  The inverse solves against the identity's columns."""
from __future__ import annotations

import numpy as _np

from .. import dtypes as dt
from .. import lax
from ..shapes import wrap_dim
from ._base import cast, dtype_of, shape
from ._creation import eye, zeros
from ._functions import imag, real
from ._indexing import slice_axis
from ._shape_ops import broadcast_to, concatenate
from ._ufuncs import negative


def result_dtype(*xs) -> _np.dtype:
    """NumPy's ``_commonType`` when an operand is complex: complex64 only when every operand
    is single precision (float32 or complex64), else complex128."""
    single = all(dtype_of(x) in (_np.dtype("float32"), _np.dtype("complex64")) for x in xs)
    return _np.dtype("complex64") if single else _np.dtype("complex128")


def _parts(x):
    x = cast(x, _np.dtype("complex128"))
    return real(x), imag(x)


def _block(a):
    """[[Ar, -Ai], [Ai, Ar]] of a stack of complex matrices (..., n, n)."""
    ar, ai = _parts(a)
    top = concatenate([ar, negative(ai)], axis=-1)
    bottom = concatenate([ai, ar], axis=-1)
    return concatenate([top, bottom], axis=-2)


def _join(x, n, axis: int):
    """The complex result from the real solution's halves along ``axis`` ([xr; xi])."""
    return lax.complex.bind(slice_axis(x, axis, 0, wrap_dim(n)), slice_axis(x, axis, wrap_dim(n), None))


def solve(a, b, real_solve):
    """``linalg.solve`` of complex operands; ``real_solve`` is the float64 solve."""
    rt = result_dtype(a, b)
    n = shape(a)[-1]
    br, bi = _parts(b)
    rhs = concatenate([br, bi], axis=0 if len(shape(b)) == 1 else -2)
    x = real_solve(_block(a), rhs)
    out = _join(x, n, 0 if len(shape(b)) == 1 else len(shape(x)) - 2)
    return cast(out, rt)


def inv(a, real_solve):
    """``linalg.inv`` of a stack of complex matrices: the block system solved against
    [I; 0]."""
    rt = result_dtype(a)
    s = shape(a)
    n = s[-1]
    ident = eye(wrap_dim(n))
    rhs = concatenate([ident, zeros((wrap_dim(n), wrap_dim(n)))], axis=0)
    rhs = broadcast_to(rhs, tuple(wrap_dim(d) for d in s[:-2]) + (wrap_dim(2 * n), wrap_dim(n)))
    x = real_solve(_block(a), rhs)
    return cast(_join(x, n, len(s) - 2), rt)


def is_complex_call(*xs) -> bool:
    return any(dt.is_complex(dtype_of(x)) for x in xs)
