"""``relaxjax.numpy.linalg``: NumPy's linear algebra over symbolic shapes.

``solve``, ``inv``, ``det``, ``cholesky`` and ``qr`` are library calls (``call_library``) of
the functions ``linalg.solve``, ``linalg.inv``, ``linalg.det``, ``linalg.cholesky`` and
``linalg.qr`` registered here: on the CPU, LAPACK called from generated code
(:mod:`relaxjax.backends.llvm.lapack`); on the numpy backend and the CUDA emulator,
``numpy.linalg``; on CUDA, ``cupy.linalg``.  ``eigh``, ``eigvalsh``, ``svd`` and ``svdvals``
(:mod:`._linalg_spectral`) call ``numpy.linalg`` on every CPU path.  Those functions take
float64 stacks of matrices (..., m, n) (``linalg.solve`` takes b transposed, (..., k, n), and
returns x transposed, in the same batch dims as a); this module casts around the call.  As
in NumPy, the computation is in float64 and the result has the inputs' type (float32 stays
float32, integers and bools give float64; float16 is rejected).  ``norm`` is composed of
array operations (its ord 2, -2 and "nuc" matrix norms of the singular values).

Errors follow NumPy: a singular matrix (``solve``, ``inv``) or one that is not positive
definite (``cholesky``) raises ``numpy.linalg.LinAlgError`` when the function runs; a
non-square argument raises :class:`LinAlgShapeError` (both a ``LinAlgError`` and an
``rj.ShapeError``) when it is traced.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as _np

from ..frontend import call_library
from ..library import lazy, register_library
from ..shapes import dmin
from ._base import arr, cast, dtype_of, env, shape
from ._linalg_common import (_F64, LinAlgError, LinAlgShapeError, _at_least_2d, _fmt, _result_dtype,  # noqa: F401
                             _square, _struct)
from ._linalg_spectral import EighResult, SVDResult, eigh, eigvalsh, svd, svdvals
from ._linalg import matmul  # noqa: F401  (numpy.linalg.matmul)
from ._shape_ops import broadcast_to, reshape, swapaxes, transpose
from . import _linalg_complex as _complex, _reductions as _red, _ufuncs as _uf

__all__ = ["solve", "inv", "det", "cholesky", "qr", "norm", "matmul", "eigh", "eigvalsh", "svd",
           "svdvals", "LinAlgError", "LinAlgShapeError", "QRResult", "EighResult", "SVDResult"]



class QRResult(NamedTuple):
    Q: object
    R: object


# ---------------------------------------------------------------------------------------------
# The library functions
# ---------------------------------------------------------------------------------------------

def _np_solve(a, bt, xt):
    xt[...] = _np.linalg.solve(a, bt.swapaxes(-1, -2)).swapaxes(-1, -2)


def _np_inv(a, out):
    out[...] = _np.linalg.inv(a)


def _np_det(a, out):
    out[...] = _np.linalg.det(a)


def _np_cholesky(a, out):
    out[...] = _np.linalg.cholesky(a)


def _np_qr(a, q, r):
    q[...], r[...] = _np.linalg.qr(a)


def _packed(x):
    """A float64 (..., 2) array as the complex128 array it holds (no copy)."""
    return x.view(_np.complex128)[..., 0]


def _np_zsolve(a, bt, xt):
    _packed(xt)[...] = _np.linalg.solve(_packed(a), _packed(bt).swapaxes(-1, -2)).swapaxes(-1, -2)


def _np_zinv(a, out):
    _packed(out)[...] = _np.linalg.inv(_packed(a))


def _error(message):
    def error(status: int):
        if status == 1:
            return LinAlgError(message)
        return RuntimeError(f"LAPACK rejected an argument (status {status}): a relaxjax bug")
    return error


for _name, _impl, _nin, _nout, _msg in (
        ("solve", _np_solve, 2, 1, "Singular matrix"),
        ("inv", _np_inv, 1, 1, "Singular matrix"),
        ("det", _np_det, 1, 1, None),
        ("cholesky", _np_cholesky, 1, 1, "Matrix is not positive definite"),
        ("qr", _np_qr, 1, 2, None),
        # complex128 as float64 pairs (a trailing dim of 2): zgetrf and friends
        ("zsolve", _np_zsolve, 2, 1, "Singular matrix"),
        ("zinv", _np_zinv, 1, 1, "Singular matrix")):
    register_library(f"linalg.{_name}", cpu=lazy(f"relaxjax.backends.llvm.lapack:{_name}"),
                     numpy=_impl, cuda=lazy(f"relaxjax.backends.cuda.library:{_name}"),
                     num_inputs=_nin, num_outputs=_nout, out_dtypes=[_F64] * _nout,
                     error=_error(_msg or "LAPACK failed"), stacked=True)
del _name, _impl, _nin, _nout, _msg


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

def _broadcast_batch(fname: str, *shapes_) -> tuple:
    from ..lax.util import broadcast_shapes
    return tuple(broadcast_shapes(env(), list(shapes_), f"linalg.{fname} batch dims"))


# ---------------------------------------------------------------------------------------------
# The API
# ---------------------------------------------------------------------------------------------

def solve(a, b):
    """``numpy.linalg.solve``: ``a`` (..., n, n), ``b`` (n,) or (..., n, k) (NumPy 2: ``b``
    is a vector only when it is 1-D); batch dims broadcast."""
    a, b = arr(a), arr(b)
    _square(a, "solve", "a")
    cplx = _complex.is_complex_call(a, b)
    if cplx:
        rt, work = _complex.result_dtype(a, b), _complex.C128
    else:
        rt, work = _result_dtype("solve", a, b), _F64
    a, b = cast(a, work), cast(b, work)
    sa, sb = shape(a), shape(b)
    n = sa[-1]
    if len(sb) == 0:
        raise LinAlgShapeError("linalg.solve: argument b is 0-dimensional; it must be (n,) or (..., n, k)")
    row_what = f"linalg.solve: b of shape {_fmt(sb)} does not match a of shape {_fmt(sa)}"
    if len(sb) == 1:
        env().require_eq(sb[0], n, row_what)
        batch, k = tuple(sa[:-2]), 1
        bt = broadcast_to(b, batch + (1, n))
    else:
        env().require_eq(sb[-2], n, row_what)
        k = sb[-1]
        batch = _broadcast_batch("solve", tuple(sa[:-2]), tuple(sb[:-2]))
        bt = swapaxes(broadcast_to(b, batch + (n, k)), -1, -2)
    a = broadcast_to(a, batch + (n, n))
    if cplx:
        xt = _complex.unpack(call_library("linalg.zsolve", _complex.pack(a), _complex.pack(bt),
                                          out=_struct(batch + (k, n, 2))))
    else:
        xt = call_library("linalg.solve", a, bt, out=_struct(batch + (k, n)))
    x = reshape(xt, batch + (n,)) if len(sb) == 1 else swapaxes(xt, -1, -2)
    return cast(x, rt)


def inv(a):
    """``numpy.linalg.inv`` of a stack of square matrices (..., n, n)."""
    a = arr(a)
    _square(a, "inv", "a")
    if _complex.is_complex_call(a):
        rt = _complex.result_dtype(a)
        a = _complex.pack(cast(a, _complex.C128))
        return cast(_complex.unpack(call_library("linalg.zinv", a, out=_struct(shape(a)))), rt)
    rt = _result_dtype("inv", a)
    a = cast(a, _F64)
    return cast(call_library("linalg.inv", a, out=_struct(shape(a))), rt)


def det(a):
    """``numpy.linalg.det`` of a stack of square matrices (..., n, n)."""
    a = arr(a)
    _square(a, "det", "a")
    rt = _result_dtype("det", a)
    a = cast(a, _F64)
    return cast(call_library("linalg.det", a, out=_struct(shape(a)[:-2])), rt)


def cholesky(a, /, *, upper: bool = False):
    """``numpy.linalg.cholesky``: the lower factor L (A = L L^T) of each symmetric positive
    definite matrix, reading only the lower triangle of ``a``; ``upper=True`` reads the upper
    triangle and gives U = L^T (A = U^T U)."""
    a = arr(a)
    _square(a, "cholesky", "a")
    rt = _result_dtype("cholesky", a)
    a = cast(a, _F64)
    if upper:
        a = swapaxes(a, -1, -2)
    out = call_library("linalg.cholesky", a, out=_struct(shape(a)))
    if upper:
        out = swapaxes(out, -1, -2)
    return cast(out, rt)


def qr(a, mode: str = "reduced"):
    """``numpy.linalg.qr`` in mode "reduced" (Q (..., m, k), R (..., k, n), k = min(m, n),
    returned as ``QRResult(Q, R)``) or "r" (R only)."""
    if mode not in ("reduced", "r"):
        raise NotImplementedError(f"linalg.qr: mode {mode!r} is not supported (use 'reduced' or 'r')")
    a = arr(a)
    _at_least_2d(a, "qr", "a")
    rt = _result_dtype("qr", a)
    a = cast(a, _F64)
    s = shape(a)
    batch, m, n = tuple(s[:-2]), s[-2], s[-1]
    k = dmin(m, n)
    q, r = call_library("linalg.qr", a, out=[_struct(batch + (m, k)), _struct(batch + (k, n))])
    q, r = cast(q, rt), cast(r, rt)
    return r if mode == "r" else QRResult(q, r)


def norm(x, ord=None, axis=None, keepdims: bool = False):
    """``numpy.linalg.norm``: vector norms (any ``ord``), the Frobenius norm and the matrix
    norms ord = 1, -1, inf, -inf, and 2, -2, "nuc" (from the singular values)."""
    x = arr(x)
    if dtype_of(x).kind == "c":
        if ord in (2, -2, "nuc") and (axis is None and len(shape(x)) == 2 or
                                      isinstance(axis, tuple) and len(axis) == 2):
            raise TypeError("linalg.norm: the 2, -2 and nuclear norms of complex matrices are "
                            "not supported (they need complex singular values)")
        x = _uf.abs(x)          # every other norm is a function of the magnitudes
    if dtype_of(x).kind not in "f":
        x = cast(x, _F64)
    nd = len(shape(x))
    if axis is None:
        if ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1):
            r = _uf.sqrt(_red.sum(_uf.multiply(x, x)))
            return reshape(r, (1,) * nd) if keepdims else r
        axis = tuple(range(nd))
    elif not isinstance(axis, tuple):
        try:
            axis = (int(axis),)
        except TypeError:
            raise TypeError("'axis' must be None, an integer or a tuple of integers") from None
    if len(axis) == 1:
        return _vector_norm(x, ord, axis, keepdims)
    if len(axis) == 2:
        return _matrix_norm(x, ord, axis, keepdims, nd)
    raise ValueError("Improper number of dimensions to norm.")


def _vector_norm(x, ord, axis, keepdims):
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")
    ax = axis[0]
    if ord is None or ord == 2:
        return _uf.sqrt(_red.sum(_uf.multiply(x, x), axis=ax, keepdims=keepdims))
    if ord == _np.inf:
        return _red.max(_uf.abs(x), axis=ax, keepdims=keepdims)
    if ord == -_np.inf:
        return _red.min(_uf.abs(x), axis=ax, keepdims=keepdims)
    if ord == 0:
        return cast(_red.sum(_uf.not_equal(x, 0), axis=ax, keepdims=keepdims), dtype_of(x))
    if ord == 1:
        return _red.sum(_uf.abs(x), axis=ax, keepdims=keepdims)
    p = float(ord)
    s = _red.sum(_uf.power(_uf.abs(x), p), axis=ax, keepdims=keepdims)
    return _uf.power(s, 1.0 / p)


def _matrix_norm(x, ord, axis, keepdims, nd):
    row, col = (a % nd for a in axis)
    if row == col:
        raise ValueError("Duplicate axes given.")
    if ord in (None, "fro", "f"):
        r = _uf.sqrt(_red.sum(_uf.multiply(x, x), axis=(row, col)))
    elif ord in (1, -1):
        red = _red.max if ord == 1 else _red.min
        r = red(_red.sum(_uf.abs(x), axis=row), axis=col - 1 if col > row else col)
    elif ord in (_np.inf, -_np.inf):
        red = _red.max if ord == _np.inf else _red.min
        r = red(_red.sum(_uf.abs(x), axis=col), axis=row - 1 if row > col else row)
    elif ord in (2, -2, "nuc"):
        # the singular values of each matrix, its two axes moved last
        others = [a for a in range(nd) if a not in (row, col)]
        sv = svdvals(transpose(x, others + [row, col]))
        r = _red.max(sv, axis=-1) if ord == 2 else _red.min(sv, axis=-1) if ord == -2 else _red.sum(sv, axis=-1)
    else:
        raise ValueError("Invalid norm order for matrices.")
    if keepdims:
        s = list(shape(x))
        s[row] = s[col] = 1
        r = reshape(r, tuple(s))
    return r
