"""Elementwise primitives: unary and binary families, select, convert.

Binary primitives broadcast like NumPy (as Relax's ops do) but are strict about dtypes:
``relaxjax.numpy`` promotes operands first.  Every primitive here is one line plus its
NumPy reference.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from .. import dtypes as dt
from ..core import PRIMITIVES, Primitive
from . import ad_util as au
from . import batching
from . import complex_math as cm
from .complex_parts import by_parts, packable
from .util import broadcast_shapes, same_dtype

FLOAT_ONLY = "float"
ANY = "any"


def _unary_shape(env, x, **p):
    return x.shape


def _weak_all(*types, **p):
    return all(t.weak for t in types)


def erf_reference(x):
    try:
        from scipy.special import erf
        return erf(x).astype(x.dtype)
    except ImportError:  # scipy is optional; math.erf is exact but slow
        return np.frompyfunc(math.erf, 1, 1)(x).astype(x.dtype)


def _out_dtype(out: str, d: np.dtype) -> np.dtype:
    return np.dtype(bool) if out == "bool" else dt.real_dtype(d) if out == "real" else d


def unary(name: str, impl, *, out: str = "same", accepts: str = ANY, complex_rule=None) -> Primitive:
    """An elementwise unary primitive.  ``out``: "same" dtype, "bool", or "real" (the
    dtype of a complex operand's parts: ``abs``).  ``complex_rule``: see ``Primitive``."""
    def dtype_rule(x, **p):
        if accepts == FLOAT_ONLY and not dt.is_float(x.dtype) and not (
                dt.is_complex(x.dtype) and complex_rule is not None):
            raise TypeError(f"{name} requires a floating-point operand, got {x.dtype}")
        return _out_dtype(out, x.dtype)

    def ref(x):
        r = impl(x)
        return np.asarray(r, dtype=_out_dtype(out, x.dtype))

    return Primitive(name, shape_rule=_unary_shape, dtype_rule=dtype_rule, impl=ref,
                     kind="elementwise", weak_rule=_weak_all, complex_rule=complex_rule)


def binary(name: str, impl, *, out: str = "same", complex_rule=None) -> Primitive:
    def shape_rule(env, x, y, **p):
        return broadcast_shapes(env, [x.shape, y.shape], name)

    def dtype_rule(x, y, **p):
        d = same_dtype(x, y, what=name)
        return np.dtype(bool) if out == "bool" else d

    def ref(x, y):
        return np.asarray(impl(x, y), dtype=bool if out == "bool" else x.dtype)

    return Primitive(name, shape_rule=shape_rule, dtype_rule=dtype_rule, impl=ref,
                     kind="elementwise", weak_rule=_weak_all, complex_rule=complex_rule)


neg = unary("neg", np.negative, complex_rule=packable("neg", dict))
abs = unary("abs", np.abs, out="real", complex_rule=cm.abs_rule)
sign = unary("sign", np.sign, complex_rule=cm.sign_rule)
exp = unary("exp", np.exp, accepts=FLOAT_ONLY, complex_rule=cm.exp_rule)
exp2 = unary("exp2", np.exp2, accepts=FLOAT_ONLY)
log = unary("log", np.log, accepts=FLOAT_ONLY, complex_rule=cm.log_rule)
log2 = unary("log2", np.log2, accepts=FLOAT_ONLY, complex_rule=cm.log2_rule)
log1p = unary("log1p", np.log1p, accepts=FLOAT_ONLY)
expm1 = unary("expm1", np.expm1, accepts=FLOAT_ONLY)
sqrt = unary("sqrt", np.sqrt, accepts=FLOAT_ONLY, complex_rule=cm.sqrt_rule)
sin = unary("sin", np.sin, accepts=FLOAT_ONLY)
cos = unary("cos", np.cos, accepts=FLOAT_ONLY)
tan = unary("tan", np.tan, accepts=FLOAT_ONLY)
asin = unary("asin", np.arcsin, accepts=FLOAT_ONLY)
acos = unary("acos", np.arccos, accepts=FLOAT_ONLY)
atan = unary("atan", np.arctan, accepts=FLOAT_ONLY)
sinh = unary("sinh", np.sinh, accepts=FLOAT_ONLY)
cosh = unary("cosh", np.cosh, accepts=FLOAT_ONLY)
tanh = unary("tanh", np.tanh, accepts=FLOAT_ONLY)
erf = unary("erf", erf_reference, accepts=FLOAT_ONLY)
floor = unary("floor", np.floor)                           # identity on integers, like NumPy 2
ceil = unary("ceil", np.ceil)
trunc = unary("trunc", np.trunc)
round = unary("round", np.round)                           # half to even, like NumPy
log10 = unary("log10", np.log10, accepts=FLOAT_ONLY, complex_rule=cm.log10_rule)
asinh = unary("asinh", np.arcsinh, accepts=FLOAT_ONLY)
acosh = unary("acosh", np.arccosh, accepts=FLOAT_ONLY)
atanh = unary("atanh", np.arctanh, accepts=FLOAT_ONLY)
reciprocal = unary("reciprocal", np.reciprocal, complex_rule=cm.reciprocal_rule)
is_nan = unary("is_nan", np.isnan, out="bool", complex_rule=cm.is_nan_rule)
is_inf = unary("is_inf", np.isinf, out="bool", complex_rule=cm.is_inf_rule)
is_finite = unary("is_finite", np.isfinite, out="bool", complex_rule=cm.is_finite_rule)
not_ = unary("not", np.invert)                              # logical on bool, bitwise on ints

add = binary("add", np.add, complex_rule=packable("add", dict))
sub = binary("sub", np.subtract, complex_rule=packable("sub", dict))
mul = binary("mul", np.multiply, complex_rule=cm.mul_rule)
div = binary("div", np.true_divide, complex_rule=cm.div_rule)   # floats and complex (numpy promotes)
floor_div = binary("floor_div", np.floor_divide)
rem = binary("rem", np.mod)                                 # sign of the divisor, like NumPy
pow = binary("pow", np.power, complex_rule=cm.pow_rule)


def _check_int_power(y):
    if np.any(np.asarray(y) < 0):
        raise ValueError("Integers to negative integer powers are not allowed.")
    return y


# NumPy's error for an integer power with a negative exponent, a run-time check of the
# exponent's data: a host operation between kernels (kind "data_dependent": never fused,
# folded or moved), so every backend raises it as NumPy does
check_int_power = Primitive("check_int_power", shape_rule=_unary_shape,
                            dtype_rule=lambda y, **p: y.dtype, impl=_check_int_power,
                            kind="data_dependent", weak_rule=lambda y, **p: y.weak)


def _check_equal(x, y, *, what):
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape or not np.array_equal(x, y):
        def show(a):
            t = np.array2string(a.ravel()[:12], separator=", ")
            return t if a.size <= 12 else t[:-1] + ", ...]"
        raise ValueError(f"{what} differ: {show(x)} and {show(y)}")
    return x


# A run-time check that two arrays hold the same data (``what`` names them in the error),
# e.g. the offsets of two ragged operands: a host operation like check_int_power, kept
# however its result is used
check_equal = Primitive("check_equal", shape_rule=lambda env, x, y, **p: x.shape,
                        dtype_rule=lambda x, y, **p: x.dtype, impl=_check_equal, kind="data_dependent")
max = binary("max", np.maximum)                             # NaN-propagating, like np.maximum
min = binary("min", np.minimum)
atan2 = binary("atan2", np.arctan2)
and_ = binary("and", np.bitwise_and)
or_ = binary("or", np.bitwise_or)
xor = binary("xor", np.bitwise_xor)
shift_left = binary("shift_left", np.left_shift)
shift_right = binary("shift_right", np.right_shift)
eq = binary("eq", np.equal, out="bool", complex_rule=cm.eq_rule)
ne = binary("ne", np.not_equal, out="bool", complex_rule=cm.ne_rule)
lt = binary("lt", np.less, out="bool")
le = binary("le", np.less_equal, out="bool")
gt = binary("gt", np.greater, out="bool")
ge = binary("ge", np.greater_equal, out="bool")


def _select_shape(env, pred, on_true, on_false):
    return broadcast_shapes(env, [pred.shape, on_true.shape, on_false.shape], "select")


def _select_dtype(pred, on_true, on_false):
    if not dt.is_bool(pred.dtype):
        raise TypeError(f"select requires a bool predicate, got {pred.dtype}")
    return same_dtype(on_true, on_false, what="select")


select = Primitive("select", shape_rule=_select_shape, dtype_rule=_select_dtype,
                   impl=lambda p, a, b: np.where(p, a, b), kind="elementwise",
                   weak_rule=lambda p, a, b: a.weak and b.weak, complex_rule=by_parts("select"))


def convert_reference(x, *, dtype, weak=False, barrier=False):
    with np.errstate(invalid="ignore", over="ignore"), warnings.catch_warnings():
        # complex -> real keeps the real part (the numpy layer's astype warns, as NumPy)
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        return x.astype(dtype)


# ``barrier=True``: a copy canonicalization neither folds (same dtype) nor lets CSE merge
# with the value it reads (``checkpoint``'s recomputation reads its inputs so)
convert = Primitive("convert", shape_rule=lambda env, x, **p: x.shape,
                    dtype_rule=lambda x, *, dtype, weak=False, barrier=False: dtype, impl=convert_reference,
                    kind="elementwise", weak_rule=lambda x, *, dtype, weak=False, barrier=False: weak,
                    complex_rule=cm.convert_rule)


def scalar_reference(name: str):
    """The NumPy reference implementation of the elementwise primitive ``name`` (arrays in,
    an array out; ``convert`` takes ``dtype=``), or None: the scalar meaning of a loop-level
    ``Op`` of that name, for the loop interpreter."""
    prim = PRIMITIVES.get(name)
    return prim.impl if prim is not None and prim.kind == "elementwise" else None


# ---------------------------------------------------------------------------------------
# Reverse-mode rules (``Primitive.vjp``, see ``ad_util``): elementwise derivatives, the
# cotangent of a broadcast operand summed back to its shape
# ---------------------------------------------------------------------------------------

def _unary_vjp(derivative):
    """The rule of ``f(x)`` from ``derivative(x, out)``, the tracer of f'(x)."""
    def rule(ct, x, *, out, **params):
        return (mul.bind(ct, derivative(x, out)),)
    return rule


def _zero_vjp(ct, *operands, out, **params):
    """Piecewise-constant ops (rounding, sign, comparisons): the derivative is 0."""
    return tuple(au.zeros_like(x) if dt.is_float(x.dtype) else None for x in operands)


def _recip(x):
    return div.bind(au.const(x, 1), x)


for _prim, _d in [
        (exp, lambda x, o: o), (exp2, lambda x, o: mul.bind(o, au.const(x, math.log(2)))),
        (expm1, lambda x, o: add.bind(o, au.const(x, 1))), (log, lambda x, o: _recip(x)),
        (log2, lambda x, o: _recip(mul.bind(x, au.const(x, math.log(2))))),
        (log10, lambda x, o: _recip(mul.bind(x, au.const(x, math.log(10))))),
        (log1p, lambda x, o: _recip(add.bind(x, au.const(x, 1)))),
        (sqrt, lambda x, o: div.bind(au.const(x, 0.5), o)),
        (sin, lambda x, o: cos.bind(x)), (cos, lambda x, o: neg.bind(sin.bind(x))),
        (tan, lambda x, o: add.bind(au.const(x, 1), mul.bind(o, o))),
        (tanh, lambda x, o: sub.bind(au.const(x, 1), mul.bind(o, o))),
        (sinh, lambda x, o: cosh.bind(x)), (cosh, lambda x, o: sinh.bind(x)),
        (asin, lambda x, o: _recip(sqrt.bind(sub.bind(au.const(x, 1), mul.bind(x, x))))),
        (acos, lambda x, o: neg.bind(_recip(sqrt.bind(sub.bind(au.const(x, 1), mul.bind(x, x)))))),
        (atan, lambda x, o: _recip(add.bind(au.const(x, 1), mul.bind(x, x)))),
        (asinh, lambda x, o: _recip(sqrt.bind(add.bind(mul.bind(x, x), au.const(x, 1))))),
        (acosh, lambda x, o: _recip(sqrt.bind(sub.bind(mul.bind(x, x), au.const(x, 1))))),
        (atanh, lambda x, o: _recip(sub.bind(au.const(x, 1), mul.bind(x, x)))),
        (erf, lambda x, o: mul.bind(au.const(x, 2 / math.sqrt(math.pi)), exp.bind(neg.bind(mul.bind(x, x))))),
        (reciprocal, lambda x, o: neg.bind(mul.bind(o, o))),
        (abs, lambda x, o: sign.bind(x))]:
    _prim.vjp = _unary_vjp(_d)
for _prim in (sign, floor, ceil, trunc, round, floor_div, rem, eq, ne, lt, le, gt, ge, is_nan,
              is_inf, is_finite):
    _prim.vjp = _zero_vjp
del _prim, _d

neg.vjp = lambda ct, x, *, out: (neg.bind(ct),)
add.vjp = lambda ct, x, y, *, out: (au.unbroadcast(ct, x), au.unbroadcast(ct, y))
sub.vjp = lambda ct, x, y, *, out: (au.unbroadcast(ct, x), au.unbroadcast(neg.bind(ct), y))
mul.vjp = lambda ct, x, y, *, out: (au.unbroadcast(mul.bind(ct, y), x),
                                    au.unbroadcast(mul.bind(ct, x), y))
div.vjp = lambda ct, x, y, *, out: (au.unbroadcast(div.bind(ct, y), x),
                                    au.unbroadcast(neg.bind(div.bind(mul.bind(ct, out), y)), y))


def _atan2_vjp(ct, y, x, *, out):
    """d atan2(y, x) = (x dy - y dx) / (x^2 + y^2)."""
    r = add.bind(mul.bind(x, x), mul.bind(y, y))
    return (au.unbroadcast(div.bind(mul.bind(ct, x), r), y),
            au.unbroadcast(neg.bind(div.bind(mul.bind(ct, y), r)), x))


def _pow_vjp(ct, x, y, *, out):
    """d(x^y) = y x^(y-1) dx + log(x) x^y dy (the second 0 where x^y is 0, as JAX)."""
    dx = mul.bind(ct, mul.bind(y, pow.bind(x, sub.bind(y, au.const(y, 1)))))
    safe = select.bind(eq.bind(x, au.const(x, 0)), au.const(x, 1), x)
    dy = mul.bind(ct, select.bind(eq.bind(out, au.const(out, 0)), au.const(out, 0),
                                  mul.bind(log.bind(safe), out)))
    return au.unbroadcast(dx, x), au.unbroadcast(dy, y)


def _extremum_vjp(pick_first):
    """max/min: the cotangent goes to the operand chosen (the first on a tie)."""
    def rule(ct, x, y, *, out):
        first = pick_first(x, y)
        zero = au.const(ct, 0)
        return (au.unbroadcast(select.bind(first, ct, zero), x),
                au.unbroadcast(select.bind(first, zero, ct), y))
    return rule


def _select_vjp(ct, p, a, b, *, out):
    zero = au.const(ct, 0)
    return None, au.unbroadcast(select.bind(p, ct, zero), a), au.unbroadcast(select.bind(p, zero, ct), b)


def _convert_vjp(ct, x, *, out, dtype, weak=False, barrier=False):
    if not (dt.is_float(x.dtype) and dt.is_float(np.dtype(dtype))):
        return (au.zeros_like(x) if dt.is_float(x.dtype) else None,)
    return (convert.bind(ct, dtype=x.dtype, weak=x.weak_type),)


pow.vjp = _pow_vjp
atan2.vjp = _atan2_vjp
max.vjp = _extremum_vjp(lambda x, y: ge.bind(x, y))
min.vjp = _extremum_vjp(lambda x, y: le.bind(x, y))
select.vjp = _select_vjp
convert.vjp = _convert_vjp


# Batching rules (``vmap``, see ``batching``): operands broadcast as NumPy does
for _prim in list(PRIMITIVES.values()):
    if _prim.kind == "elementwise":
        _prim.batch = batching.broadcasting(_prim)
del _prim
