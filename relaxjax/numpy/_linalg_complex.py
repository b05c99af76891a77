"""Complex ``linalg.solve`` and ``linalg.inv``: complex128 values packed as float64 pairs (a
trailing dim of 2, complex128's own memory layout) for the library functions
``linalg.zsolve`` and ``linalg.zinv`` (LAPACK's zgetrf/zgetrs/zgetri on the CPU), so nothing
below the numpy layer sees a complex matrix; packing and unpacking are copies of O(n^2)
beside the O(n^3) factorization.  (The real block form [[Ar, -Ai], [Ai, Ar]] that preceded
this did twice zgetrf's flops.)"""
from __future__ import annotations

import numpy as _np

from .. import dtypes as dt
from .. import lax
from ._base import dtype_of
from ._functions import imag, real
from ._shape_ops import stack


def result_dtype(*xs) -> _np.dtype:
    """NumPy's ``_commonType`` when an operand is complex: complex64 only when every operand
    is single precision (float32 or complex64), else complex128."""
    single = all(dtype_of(x) in (_np.dtype("float32"), _np.dtype("complex64")) for x in xs)
    return _np.dtype("complex64") if single else _np.dtype("complex128")


C128 = _np.dtype("complex128")


def pack(x):
    """A complex128 array (...) as float64 (..., 2): real and imaginary parts side by side."""
    return stack([real(x), imag(x)], axis=-1)


def unpack(x):
    """The complex128 array a float64 (..., 2) holds."""
    return lax.complex.bind(x[..., 0], x[..., 1])


def is_complex_call(*xs) -> bool:
    return any(dt.is_complex(dtype_of(x)) for x in xs)
