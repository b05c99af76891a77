"""The complex rules of the elementwise primitives: complex arithmetic on (re, im) parts,
with the formulas NumPy's loops use (multiply, Smith's division, small integer powers by
repeated squaring; equal to rounding, since NumPy's SIMD loops and LLVM may fuse
multiply-adds) and C's for what NumPy leaves to libm (exp, log, sqrt, hypot, cpow).

Each rule takes :class:`Parts` for complex operands and binds real primitives (looked up by
name when the rule runs: ``elementwise`` defines them and names these rules).
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as dt
from ..core import PRIMITIVES
from ..ir import Literal
from .complex_parts import Parts, scalar
from .util import bind as _bind


def _add(a, b): return _bind("add", a, b)
def _sub(a, b): return _bind("sub", a, b)
def _mul(a, b): return _bind("mul", a, b)
def _div(a, b): return _bind("div", a, b)
def _sel(p, a, b): return _bind("select", p, a, b)
def _and(a, b): return _bind("and", a, b)
def _or(a, b): return _bind("or", a, b)
def _eq(a, b): return _bind("eq", a, b)
def _abs(a): return _bind("abs", a)
def _c(x, v): return scalar(v, x.dtype)     # a constant of x's dtype


def cmul(a: Parts, b: Parts) -> Parts:
    """NumPy's complex multiply: (ar br - ai bi, ar bi + ai br)."""
    return Parts(_sub(_mul(a.re, b.re), _mul(a.im, b.im)), _add(_mul(a.re, b.im), _mul(a.im, b.re)))


def cdiv(a: Parts, b: Parts) -> Parts:
    """NumPy's complex divide: Smith's algorithm, scaling by the larger part of ``b`` (no
    overflow where the quotient is finite); division by 0 gives NumPy's inf/NaN."""
    abr, abi = _abs(b.re), _abs(b.im)
    # |br| >= |bi|: rat = bi / br, scl = 1 / (br + bi rat)
    rat1 = _div(b.im, b.re)
    scl1 = _div(_c(b.re, 1), _add(b.re, _mul(b.im, rat1)))
    re1 = _mul(_add(a.re, _mul(a.im, rat1)), scl1)
    im1 = _mul(_sub(a.im, _mul(a.re, rat1)), scl1)
    zero = _and(_eq(abr, _c(abr, 0)), _eq(abi, _c(abi, 0)))
    re1, im1 = _sel(zero, _div(a.re, abr), re1), _sel(zero, _div(a.im, abr), im1)
    # |br| < |bi|: rat = br / bi, scl = 1 / (bi + br rat)
    rat2 = _div(b.re, b.im)
    scl2 = _div(_c(b.re, 1), _add(b.im, _mul(b.re, rat2)))
    re2 = _mul(_add(_mul(a.re, rat2), a.im), scl2)
    im2 = _mul(_sub(_mul(a.im, rat2), a.re), scl2)
    first = _bind("ge", abr, abi)
    return Parts(_sel(first, re1, re2), _sel(first, im1, im2))


def hypot(x, y):
    """|x + iy| without overflow or underflow, with one square root and no division:
    ``sqrt(x^2 + y^2)``, the parts first scaled by an exact power of two when the larger one
    is so large or small that the sum of squares would overflow or lose bits (as accurate
    as libm's hypot, and the plain formula's result wherever that one is safe); an infinite
    part gives inf even against NaN, as C's hypot."""
    info = np.finfo(x.dtype)
    lim = min(info.maxexp - 1, -info.minexp) // 2 - 4     # |part| <= 2**lim: squares are safe
    k = 2 * lim - 8                                       # brings any finite part within it
    ax, ay = _abs(x), _abs(y)
    big = _bind("max", ax, ay)
    large, tiny = _bind("gt", big, _c(big, 2.0 ** lim)), _bind("lt", big, _c(big, 2.0 ** -lim))
    down = _sel(large, _c(x, 2.0 ** -k), _sel(tiny, _c(x, 2.0 ** k), _c(x, 1)))
    up = _sel(large, _c(x, 2.0 ** k), _sel(tiny, _c(x, 2.0 ** -k), _c(x, 1)))
    xs, ys = _mul(x, down), _mul(y, down)
    r = _mul(_bind("sqrt", _add(_mul(xs, xs), _mul(ys, ys))), up)
    inf = _or(_bind("is_inf", ax), _bind("is_inf", ay))
    return _sel(inf, _c(x, np.inf), r)


def signbit(x):
    """x < 0, -0.0 included (atan2(-0.0, -1) is -pi)."""
    return _bind("lt", _bind("atan2", x, _c(x, -1)), _c(x, 0))


def copysign(m, s):
    """|m| with the sign of s."""
    am = _abs(m)
    return _sel(signbit(s), _bind("neg", am), am)


# ---------------------------------------------------------------------------------------
# The rules (named by the primitives in elementwise.py)
# ---------------------------------------------------------------------------------------

def mul_rule(a: Parts, b: Parts) -> Parts:
    return cmul(a, b)


def div_rule(a: Parts, b: Parts) -> Parts:
    return cdiv(a, b)


def abs_rule(z: Parts):
    return hypot(z.re, z.im)


def reciprocal_rule(z: Parts) -> Parts:
    return cdiv(Parts(_c(z.re, 1), _c(z.im, 0)), z)


def sign_rule(z: Parts) -> Parts:
    """NumPy 2: z / |z|, and 0 for 0."""
    m = hypot(z.re, z.im)
    zero = _eq(m, _c(m, 0))
    safe = _sel(zero, _c(m, 1), m)
    return Parts(_sel(zero, _c(m, 0), _div(z.re, safe)), _sel(zero, _c(m, 0), _div(z.im, safe)))


def exp_rule(z: Parts) -> Parts:
    """e^re (cos im + i sin im); a zero imaginary part stays exactly zero (C's cexp)."""
    e = _bind("exp", z.re)
    im = _sel(_eq(z.im, _c(z.im, 0)), z.im, _mul(e, _bind("sin", z.im)))
    return Parts(_mul(e, _bind("cos", z.im)), im)


def log_rule(z: Parts) -> Parts:
    return Parts(_bind("log", hypot(z.re, z.im)), _bind("atan2", z.im, z.re))


def _scaled_log(scale: float):
    def rule(z: Parts) -> Parts:
        lz = log_rule(z)
        return Parts(_mul(lz.re, _c(lz.re, scale)), _mul(lz.im, _c(lz.im, scale)))
    return rule


log2_rule = _scaled_log(1 / math.log(2))
log10_rule = _scaled_log(1 / math.log(10))


def sqrt_rule(z: Parts) -> Parts:
    """The principal root as C's csqrt computes it: t = sqrt((|a| + |z|) / 2) on the side
    of a's sign, the other part b / 2t; scaled by 1/4 near overflow; sqrt(±0 + bi) with
    b = ±0 keeps b, an infinite b gives inf + bi."""
    a, b = z.re, z.im
    thresh = float(np.finfo(a.dtype).max) / (1 + math.sqrt(2)) * 0.99
    big = _or(_bind("ge", _abs(a), _c(a, thresh)), _bind("ge", _abs(b), _c(b, thresh)))
    s = _sel(big, _c(a, 0.25), _c(a, 1))
    a, b = _mul(a, s), _mul(b, s)
    h = hypot(a, b)
    t = _bind("sqrt", _mul(_add(_abs(a), h), _c(h, 0.5)))
    two_t = _mul(t, _c(t, 2))
    pos = _bind("ge", a, _c(a, 0))
    re = _sel(pos, t, _div(_abs(b), two_t))
    im = _sel(pos, _div(b, two_t), copysign(t, b))
    k = _sel(big, _c(a, 2), _c(a, 1))
    re, im = _mul(re, k), _mul(im, k)
    zero = _and(_eq(z.re, _c(a, 0)), _eq(z.im, _c(b, 0)))
    re, im = _sel(zero, _c(a, 0), re), _sel(zero, z.im, im)
    binf = _bind("is_inf", z.im)
    return Parts(_sel(binf, _c(a, np.inf), re), _sel(binf, z.im, im))


def _constant(x):
    """The value of a constant operand (a literal), else None."""
    atom = getattr(x, "atom", None)
    if isinstance(atom, Literal) and isinstance(atom.value, (np.ndarray, np.generic)):
        return np.asarray(atom.value)
    return None


def _small_integer_exponent(b: Parts) -> int | None:
    """NumPy's small-integer path of complex power: a constant exponent that is one real
    integer n with |n| < 100, else None."""
    re, im = _constant(b.re), _constant(b.im)
    if re is None or im is None or re.size == 0 or np.any(im != 0):
        return None
    first = re.flat[0]
    if not np.all(re == first) or not np.isfinite(first) or first != int(first) or abs(first) >= 100:
        return None
    return int(first)


def pow_rule(a: Parts, b: Parts) -> Parts:
    """NumPy's complex power: z^0 = 1; 0^p is 0 where Re p > 0, NaN otherwise; a constant
    small integer exponent by repeated squaring (as NumPy, exact where multiplication is);
    any other exponent as exp(p log z), as C's cpow."""
    n = _small_integer_exponent(b)
    one, zero_ = _c(a.re, 1), _c(a.re, 0)
    if n == 0:
        return Parts(_bind("broadcast_to", one, shape=a.re.type.shape),
                     _bind("broadcast_to", zero_, shape=a.re.type.shape))
    if n is not None:
        m, p, acc = abs(n), a, None
        while True:
            if m & 1:
                acc = p if acc is None else cmul(acc, p)
            m >>= 1
            if not m:
                break
            p = cmul(p, p)
        if n > 0:
            return acc
        r = cdiv(Parts(one, zero_), acc)
        nan = _c(a.re, np.nan)
        is0 = _and(_eq(a.re, zero_), _eq(a.im, zero_))
        return Parts(_sel(is0, nan, r.re), _sel(is0, nan, r.im))
    r = exp_rule(cmul(b, log_rule(a)))
    is0 = _and(_eq(a.re, zero_), _eq(a.im, zero_))
    b0 = _and(_eq(b.re, zero_), _eq(b.im, zero_))
    at0 = _sel(_bind("gt", b.re, zero_), zero_, _c(a.re, np.nan))
    re = _sel(b0, one, _sel(is0, at0, r.re))
    im = _sel(b0, zero_, _sel(is0, at0, r.im))
    return Parts(re, im)


def eq_rule(a: Parts, b: Parts):
    return _and(_eq(a.re, b.re), _eq(a.im, b.im))


def ne_rule(a: Parts, b: Parts):
    return _or(_bind("ne", a.re, b.re), _bind("ne", a.im, b.im))


def is_nan_rule(z: Parts):
    return _or(_bind("is_nan", z.re), _bind("is_nan", z.im))


def is_inf_rule(z: Parts):
    return _or(_bind("is_inf", z.re), _bind("is_inf", z.im))


def is_finite_rule(z: Parts):
    return _and(_bind("is_finite", z.re), _bind("is_finite", z.im))


def convert_rule(x, *, dtype, weak=False, barrier=False):
    """Between complex dtypes part by part; a real value becomes the real part (imaginary
    part 0); a complex one converts to bool as ``z != 0`` and to a real dtype by its real
    part (NumPy's astype, which warns that it drops the imaginary part)."""
    dtype = np.dtype(dtype)
    conv = PRIMITIVES["convert"]
    if not isinstance(x, Parts):
        rd = dt.real_dtype(dtype)
        re = conv.bind(x, dtype=rd, weak=weak)
        return Parts(re, _bind("broadcast_to", scalar(0, rd), shape=re.type.shape))
    if dt.is_complex(dtype):
        rd = dt.real_dtype(dtype)
        return Parts(conv.bind(x.re, dtype=rd, weak=weak), conv.bind(x.im, dtype=rd, weak=weak))
    if dt.is_bool(dtype):
        return _or(_bind("ne", x.re, _c(x.re, 0)), _bind("ne", x.im, _c(x.im, 0)))
    return conv.bind(x.re, dtype=dtype, weak=weak)
