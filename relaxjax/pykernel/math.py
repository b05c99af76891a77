"""``rj.math``: scalar math for kernels (``rj.math.exp(x[i])``).

Inside a kernel these follow NumPy's ufuncs, dtype included (``exp`` of a float32 is a
float32; of an integer, a float64).  Python's ``math`` module names (``math.exp``, ...) mean
the same inside a kernel.  Outside kernels these are the NumPy functions themselves.
"""
import numpy as _np

from ..lax.elementwise import erf_reference

exp, exp2, expm1, log, log2, log10, log1p = (_np.exp, _np.exp2, _np.expm1, _np.log, _np.log2,
                                             _np.log10, _np.log1p)
sqrt, sin, cos, tan, asin, acos, atan = (_np.sqrt, _np.sin, _np.cos, _np.tan, _np.arcsin,
                                         _np.arccos, _np.arctan)
sinh, cosh, tanh, asinh, acosh, atanh = (_np.sinh, _np.cosh, _np.tanh, _np.arcsinh, _np.arccosh,
                                         _np.arctanh)
floor, ceil, trunc, fabs, isnan, isinf, isfinite = (_np.floor, _np.ceil, _np.trunc, _np.fabs,
                                                    _np.isnan, _np.isinf, _np.isfinite)
atan2, pow, maximum, minimum = _np.arctan2, _np.power, _np.maximum, _np.minimum
pi, e, inf, nan = _np.pi, _np.e, _np.inf, _np.nan


def erf(x):
    """The error function (scipy's when installed)."""
    return erf_reference(_np.asarray(x, _np.result_type(x, _np.float32)))


__all__ = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos", "tan",
           "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "floor",
           "ceil", "trunc", "fabs", "isnan", "isinf", "isfinite", "atan2", "pow", "maximum",
           "minimum", "erf", "pi", "e", "inf", "nan"]
