"""Elementwise functions: NumPy ufunc names over lax primitives, with NEP 50 promotion."""
from __future__ import annotations

import numpy as np

from .. import lax
from ..core import Tracer
from ..shapes import is_symbolic
from ._base import arr, cast, dtype_of, fresh, is_weak, promote, spec
from .. import dtypes as dt


def _operand(a):
    """Python scalars stay weak; a (weak) bool becomes a strong bool, since NumPy's loop
    resolution has no weak bool (and bool is the lowest kind, so promotion is the same)."""
    if isinstance(a, bool):
        return np.asarray(a)
    if isinstance(a, (int, float, complex)):
        return a
    a = arr(a)
    if isinstance(a, Tracer) and a.weak_type and dt.is_bool(a.dtype):
        return lax.convert.bind(a, dtype=np.dtype(bool), weak=False)
    return a


def _promote_ufunc(np_name: str, args):
    uf = getattr(np, np_name)
    if len(args) != uf.nin:
        raise TypeError(f"{np_name}() takes {uf.nin} arguments, got {len(args)}")
    with np.errstate(over="ignore"):     # x_f32 + 1e300: inf, like NumPy (silently when traced)
        return promote(*[_operand(a) for a in args], ufunc=np_name)


def _strong(r):
    """NumPy functions return arrays, never Python scalars: the result is not weak."""
    if isinstance(r, Tracer) and r.weak_type:
        return lax.convert.bind(r, dtype=r.dtype, weak=False)
    return r


def _traced_operand(args) -> bool:
    from ..shapes import SymbolicDim
    return any(isinstance(a, (Tracer, SymbolicDim)) for a in args)


def _delegate(args):
    """The ``__relaxjax_ufunc__(fn, args)`` of an operand's type that applies elementwise
    functions itself (``relaxjax.ragged.RaggedArray``: on its packed values), or None."""
    for a in args:
        h = getattr(type(a), "__relaxjax_ufunc__", None)
        if h is not None:
            return h
    return None


def _ufunc(np_name: str, prim, operator: bool = False):
    """A NumPy-named function: promote operands as ``np.<np_name>`` would, then bind ``prim``.

    The function returns a strong array, as NumPy does: ``rnp.sqrt(2.0) * x_f32`` is float64,
    ``rnp.abs(n) + 1`` with a dim ``n`` is int64 like ``np.abs(3) + 1``.  Functions that
    implement Python operators also get ``fn.as_operator``, whose result stays weak (like a
    Python scalar) for weak traced operands: ``n / 2`` with a symbolic dim ``n`` is a Python
    float in NumPy.
    """
    def fn(*args):
        if (h := _delegate(args)) is not None:
            return h(fn, args)
        return _strong(prim.bind(*_promote_ufunc(np_name, args)))
    fn.__name__ = np_name
    fn.__doc__ = f"Elementwise ``numpy.{np_name}``."
    if operator:
        def as_operator(*args):
            if (h := _delegate(args)) is not None:
                return h(as_operator, args)
            r = prim.bind(*_promote_ufunc(np_name, args))
            return r if _traced_operand(args) else _strong(r)
        fn.as_operator = as_operator
    return fn


def _logical(np_name: str, prim):
    """``numpy.logical_*``: operands are truth values (nonzero), the result is bool."""
    def fn(*args):
        if (h := _delegate(args)) is not None:
            return h(fn, args)
        xs = _promote_ufunc(np_name, args)          # NumPy's TypeErrors, broadcasting dtypes
        return prim.bind(*[cast(x, np.dtype(bool)) for x in xs])
    fn.__name__ = np_name
    fn.__doc__ = f"Elementwise ``numpy.{np_name}``."
    return fn


# unary
negative = _ufunc("negative", lax.neg, operator=True)
absolute = abs = _ufunc("absolute", lax.abs, operator=True)
sign = _ufunc("sign", lax.sign)
exp = _ufunc("exp", lax.exp)
exp2 = _ufunc("exp2", lax.exp2)
log = _ufunc("log", lax.log)
log2 = _ufunc("log2", lax.log2)
log10 = _ufunc("log10", lax.log10)
log1p = _ufunc("log1p", lax.log1p)
expm1 = _ufunc("expm1", lax.expm1)
sqrt = _ufunc("sqrt", lax.sqrt)
sin = _ufunc("sin", lax.sin)
cos = _ufunc("cos", lax.cos)
tan = _ufunc("tan", lax.tan)
arcsin = _ufunc("arcsin", lax.asin)
arccos = _ufunc("arccos", lax.acos)
arctan = _ufunc("arctan", lax.atan)
sinh = _ufunc("sinh", lax.sinh)
cosh = _ufunc("cosh", lax.cosh)
tanh = _ufunc("tanh", lax.tanh)
arcsinh = _ufunc("arcsinh", lax.asinh)
arccosh = _ufunc("arccosh", lax.acosh)
arctanh = _ufunc("arctanh", lax.atanh)
floor = _ufunc("floor", lax.floor)
ceil = _ufunc("ceil", lax.ceil)
trunc = _ufunc("trunc", lax.trunc)
rint = _ufunc("rint", lax.round)
reciprocal = _ufunc("reciprocal", lax.reciprocal)
isnan = _ufunc("isnan", lax.is_nan)
isinf = _ufunc("isinf", lax.is_inf)
isfinite = _ufunc("isfinite", lax.is_finite)
logical_not = _logical("logical_not", lax.not_)
invert = bitwise_not = bitwise_invert = _ufunc("invert", lax.not_, operator=True)

# binary
add = _ufunc("add", lax.add, operator=True)
subtract = _ufunc("subtract", lax.sub, operator=True)
multiply = _ufunc("multiply", lax.mul, operator=True)
divide = true_divide = _ufunc("true_divide", lax.div, operator=True)
floor_divide = _ufunc("floor_divide", lax.floor_div, operator=True)
mod = remainder = _ufunc("remainder", lax.rem, operator=True)
def power(x1, x2):
    """Elementwise ``numpy.power``.  An integer power checks its exponents as NumPy does
    (ValueError for a negative one): at trace time when they are constants, else at run
    time."""
    if (h := _delegate((x1, x2))) is not None:
        return h(power, (x1, x2))
    a, b = _promote_ufunc("power", (x1, x2))
    if b.dtype.kind == "i" and a.dtype.kind == "i" and dtype_of(x2).kind not in "ub":
        atom = b.atom if isinstance(b, Tracer) else None
        if atom is not None and hasattr(atom, "value") and not is_symbolic(atom.value):
            lax.check_int_power.impl(atom.value)
        elif isinstance(b, Tracer):
            b = lax.check_int_power.bind(b)
        else:
            lax.check_int_power.impl(b)
    r = lax.pow.bind(a, b)
    return r if _traced_operand((x1, x2)) else _strong(r)


pow = power
maximum = _ufunc("maximum", lax.max)
minimum = _ufunc("minimum", lax.min)
arctan2 = _ufunc("arctan2", lax.atan2)
bitwise_and = _ufunc("bitwise_and", lax.and_, operator=True)
bitwise_or = _ufunc("bitwise_or", lax.or_, operator=True)
bitwise_xor = _ufunc("bitwise_xor", lax.xor, operator=True)
left_shift = _ufunc("left_shift", lax.shift_left, operator=True)
right_shift = _ufunc("right_shift", lax.shift_right, operator=True)
logical_and = _logical("logical_and", lax.and_)
logical_or = _logical("logical_or", lax.or_)
logical_xor = _logical("logical_xor", lax.xor)

# x OP v with v a Python int beyond x's integer dtype: NumPy 2 compares the values exactly
# (the answer is the same for every element) instead of raising OverflowError.
_FLIP = {"equal": "equal", "not_equal": "not_equal", "less": "greater", "less_equal": "greater_equal",
         "greater": "less", "greater_equal": "less_equal"}
_TRUE_IF_V_ABOVE = {"equal": False, "not_equal": True, "less": True, "less_equal": True,
                    "greater": False, "greater_equal": False}


def _comparison(np_name: str, prim):
    base = _ufunc(np_name, prim, operator=True)

    def fn(*args):
        if (h := _delegate(args)) is not None:
            return h(fn, args)
        if len(args) == 2:
            for i, name in ((1, np_name), (0, _FLIP[np_name])):      # x OP v, or v OP x
                v, x = args[i], args[1 - i]
                if isinstance(v, int) and not isinstance(v, bool) and not isinstance(x, (int, float)):
                    x = arr(x)
                    d = dtype_of(x)
                    if dt.is_int(d) and not np.iinfo(d).min <= v <= np.iinfo(d).max:
                        truth = _TRUE_IF_V_ABOVE[name]
                        if v < 0 and name not in ("equal", "not_equal"):
                            truth = not truth
                        return (lax.eq if truth else lax.ne).bind(x, x)   # ints: x == x is all True
        return base(*args)
    fn.__name__ = np_name
    fn.__doc__ = base.__doc__
    return fn


equal = _comparison("equal", lax.eq)
not_equal = _comparison("not_equal", lax.ne)
less = _comparison("less", lax.lt)
less_equal = _comparison("less_equal", lax.le)
greater = _comparison("greater", lax.gt)
greater_equal = _comparison("greater_equal", lax.ge)


def conjugate(x):
    """Elementwise ``numpy.conjugate``: re - i im for a complex array, a copy of a real one."""
    x = arr(x)
    if dt.is_complex(dtype_of(x)):
        return lax.complex.bind(lax.real.bind(x), lax.neg.bind(lax.imag.bind(x)))
    return fresh(_strong(x), x)


conj = conjugate


def positive(x):
    """Elementwise ``numpy.positive`` (a copy with the same dtype; bool is an error, as in NumPy)."""
    x = arr(x)
    if dt.is_bool(dtype_of(x)):
        raise TypeError("positive is not defined for bool")
    return fresh(_strong(x), x)


def square(x):
    """Elementwise ``numpy.square``."""
    (x,) = _promote_ufunc("square", (x,))
    return _strong(lax.mul.bind(x, x))


def round(a, decimals: int = 0):
    """``numpy.round``: half to even; ``decimals`` scales by a power of ten like NumPy
    (``x * 10**d`` for ``d >= 0``, ``x / 10**-d`` for ``d < 0``, then back)."""
    a = arr(a)
    d = dtype_of(a)
    if dt.is_bool(d):
        if decimals != 0:         # NumPy: no loop to multiply bools by a float scale
            raise TypeError("round with decimals != 0 is not defined for bool")
        return rint(a)            # NumPy: float16
    if decimals == 0:
        return _strong(lax.round.bind(a))
    if not dt.is_float(d):
        if decimals > 0:
            return fresh(_strong(a), a)
        # NumPy rounds integers to tens/hundreds through float64, half to even
        scale = cast(10.0 ** -decimals, np.float64)
        r = lax.mul.bind(lax.round.bind(lax.div.bind(cast(a, np.float64), scale)), scale)
        return _strong(cast(r, d))
    if decimals > 0:
        scale = cast(10.0 ** decimals, d)
        return _strong(lax.div.bind(lax.round.bind(lax.mul.bind(a, scale)), scale))
    scale = cast(10.0 ** -decimals, d)
    return _strong(lax.mul.bind(lax.round.bind(lax.div.bind(a, scale)), scale))


around = round


def where_values(condition, x, y):
    """``numpy.where(condition, x, y)``: elementwise selection (``where`` with one argument
    is ``nonzero``, in _indexing)."""
    cond = cast(arr(condition), np.dtype(bool))
    xs = [v if isinstance(v, (bool, int, float, complex)) else arr(v) for v in (x, y)]
    x, y = promote(*xs)
    return _strong(lax.select.bind(cond, x, y))


def clip(a, a_min=None, a_max=None):
    """``numpy.clip`` as maximum then minimum (same promotion as NumPy 2)."""
    if a_min is None and a_max is None:
        raise ValueError("one of a_min or a_max must be given")
    out = arr(a)
    if a_min is not None:
        out = maximum(out, a_min)
    if a_max is not None:
        out = minimum(out, a_max)
    return out


def astype(x, dtype, copy: bool = True):
    """``x.astype(dtype)`` / ``numpy.astype``."""
    from ..dtypes import canonical
    x = arr(x)
    d = canonical(dtype)
    if dt.is_complex(dtype_of(x)) and not dt.is_complex(d) and not dt.is_bool(d):
        import warnings
        warnings.warn("Casting complex values to real discards the imaginary part",
                      np.exceptions.ComplexWarning, stacklevel=2)
    out = cast(x, d)
    return fresh(out, x) if copy else out


def copy(a):
    """``numpy.copy``: a new array (a traced value with no alias)."""
    a = arr(a)
    return fresh(a, a)
