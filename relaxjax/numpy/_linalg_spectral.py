"""``linalg.eigh``, ``eigvalsh``, ``svd`` and ``svdvals``: library calls of the functions
``linalg.eigh``, ``linalg.eigvalsh``, ``linalg.svd``, ``linalg.svd_reduced`` and
``linalg.svdvals`` registered here.

These are iterative LAPACK drivers (``syevd``, ``gesdd``) whose cost is cubic in the matrix
size, so a Python call between native segments costs nothing in comparison: on every CPU
path (llvm, the numpy backend, the CUDA emulator) the implementation is ``numpy.linalg``'s
LAPACK, and on CUDA ``cupy.linalg`` (cuSOLVER).  As for the other ``linalg`` functions the
computation is in float64 and the results have the input's type (float32 stays float32).
Singular vectors and eigenvectors are those LAPACK returns: unique up to sign (and within
a degenerate eigenspace), as in NumPy.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as _np

from ..frontend import call_library
from ..library import lazy, register_library
from ..shapes import dmin
from ._base import arr, cast, shape
from ._linalg_common import _F64, _at_least_2d, _result_dtype, _square, _struct
from ._shape_ops import swapaxes


class EighResult(NamedTuple):
    eigenvalues: object
    eigenvectors: object


class SVDResult(NamedTuple):
    U: object
    S: object
    Vh: object


def _np_eigh(a, w, v):
    w[...], v[...] = _np.linalg.eigh(a)


def _np_eigvalsh(a, w):
    w[...] = _np.linalg.eigvalsh(a)


def _np_svd(a, u, s, vh):
    u[...], s[...], vh[...] = _np.linalg.svd(a, full_matrices=True)


def _np_svd_reduced(a, u, s, vh):
    u[...], s[...], vh[...] = _np.linalg.svd(a, full_matrices=False)


def _np_svdvals(a, s):
    s[...] = _np.linalg.svd(a, compute_uv=False)


for _name, _impl, _nout in (("eigh", _np_eigh, 2), ("eigvalsh", _np_eigvalsh, 1), ("svd", _np_svd, 3),
                            ("svd_reduced", _np_svd_reduced, 3), ("svdvals", _np_svdvals, 1)):
    register_library(f"linalg.{_name}", cpu=_impl, numpy=_impl,
                     cuda=lazy(f"relaxjax.backends.cuda.library:{_name}"),
                     num_inputs=1, num_outputs=_nout, out_dtypes=[_F64] * _nout, stacked=True)
del _name, _impl, _nout


def eigh(a, UPLO: str = "L"):
    """``numpy.linalg.eigh``: the eigenvalues (ascending, (..., n)) and eigenvectors (the
    columns of (..., n, n)) of each symmetric matrix, reading its lower triangle (``UPLO``
    "L") or its upper one ("U")."""
    a, rt = _prepare(a, "eigh", UPLO, _square)
    s = tuple(shape(a))
    return EighResult(*_call("linalg.eigh", a, [s[:-1], s], rt))


def eigvalsh(a, UPLO: str = "L"):
    """``numpy.linalg.eigvalsh``: the eigenvalues (ascending) of each symmetric matrix."""
    a, rt = _prepare(a, "eigvalsh", UPLO, _square)
    return _call("linalg.eigvalsh", a, [tuple(shape(a))[:-1]], rt)[0]


def svd(a, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False):
    """``numpy.linalg.svd``: ``SVDResult(U, S, Vh)`` with A = U diag(S) Vh, S descending;
    U (..., m, m) and Vh (..., n, n), or with ``full_matrices=False`` (..., m, k) and
    (..., k, n), k = min(m, n); only S with ``compute_uv=False``."""
    if hermitian:
        raise NotImplementedError("linalg.svd: hermitian=True is not supported (use eigh)")
    a, rt = _prepare(a, "svd", "L", _at_least_2d)
    s = tuple(shape(a))
    batch, m, n = s[:-2], s[-2], s[-1]
    k = dmin(m, n)
    if not compute_uv:
        return _call("linalg.svdvals", a, [batch + (k,)], rt)[0]
    if full_matrices:
        return SVDResult(*_call("linalg.svd", a, [batch + (m, m), batch + (k,), batch + (n, n)], rt))
    return SVDResult(*_call("linalg.svd_reduced", a, [batch + (m, k), batch + (k,), batch + (k, n)], rt))


def svdvals(x):
    """``numpy.linalg.svdvals``: the singular values of each matrix, descending."""
    return svd(x, compute_uv=False)


def _prepare(a, fname: str, UPLO: str, check):
    """``a`` as float64 (the upper triangle of A is the lower one of A^T: "U" transposes)
    and the result dtype."""
    if UPLO not in ("L", "U"):
        raise ValueError(f"linalg.{fname}: UPLO argument must be 'L' or 'U', got {UPLO!r}")
    a = arr(a)
    check(a, fname, "a")
    rt = _result_dtype(fname, a)
    a = cast(a, _F64)
    return (swapaxes(a, -1, -2) if UPLO == "U" else a), rt


def _call(name: str, a, shapes: list, rt) -> list:
    outs = call_library(name, a, out=[_struct(s) for s in shapes])
    return [cast(o, rt) for o in outs]
