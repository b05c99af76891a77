"""NumPy-compatible functions that trace into relaxjax IR (and run eagerly on NumPy arrays).

Names, arguments and result dtypes follow NumPy 2 with NEP 50 promotion: Python scalars are
weak, so ``x * 2.0`` keeps ``x``'s float32.
"""
import numpy as _np

from ._ufuncs import *  # noqa: F401,F403
from ._ufuncs import abs, pow, round  # noqa: F401
from ._reductions import (sum, prod, max, min, amax, amin, all, any, mean, var, std,  # noqa: F401
                          argmax, argmin, cumsum, cumprod, ptp)
from ._shape_ops import (reshape, ravel, transpose, permute_dims, swapaxes, moveaxis,  # noqa: F401
                         broadcast_to, broadcast_arrays, expand_dims, squeeze, atleast_1d, atleast_2d,
                         concatenate, concat, stack, hstack, vstack, tile, repeat, pad, tri, tril, triu)
from ._indexing import (take, take_along_axis, nonzero, argwhere, where, split,  # noqa: F401
                        array_split, flip, fliplr, flipud, diff)
from ._linalg import matmul, dot, vdot, inner, outer, tensordot, einsum  # noqa: F401
from ._matrix import diagonal, diag, trace, roll, cov, corrcoef  # noqa: F401
from ._sorting import sort, argsort  # noqa: F401
from ._creation import (full, zeros, ones, empty, full_like, zeros_like, ones_like,  # noqa: F401
                        empty_like, arange, eye, identity, array, asarray)
from ._extras import *  # noqa: F401,F403  (linspace, isclose, histogram, median, ...)
from . import linalg  # noqa: F401  (rnp.linalg: library calls, see relaxjax.library)
from ._base import shape as _shape

bool_ = _np.bool_
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
float16, float32, float64 = _np.float16, _np.float32, _np.float64
complex64, complex128 = _np.complex64, _np.complex128
pi, e, inf, nan, newaxis = _np.pi, _np.e, _np.inf, _np.nan, None
dtype = _np.dtype
ndarray = _np.ndarray


def shape(a):
    """``numpy.shape`` (symbolic dims inside a trace)."""
    from ._base import arr, user_shape
    return user_shape(_shape(arr(a)))


def ndim(a):
    from ._base import arr
    return len(_shape(arr(a)))


def size(a):
    from ._base import arr
    from ..shapes import prod, wrap_dim
    return wrap_dim(prod(_shape(arr(a))))


def result_type(*args):
    from ._base import spec
    from ..dtypes import result_type as _rt
    return _rt(*(spec(a) if not isinstance(a, (_np.dtype, type, str)) or isinstance(a, type) and
                 a in (bool, int, float, complex) else _np.dtype(a) for a in args))


import sys as _sys  # noqa: E402

from ._tracer_methods import install as _install_tracer_methods  # noqa: E402
from ._ufunc_methods import attach as _attach_ufunc_methods  # noqa: E402

_install_tracer_methods(_sys.modules[__name__])
_attach_ufunc_methods()
