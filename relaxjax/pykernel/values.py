"""The values of the kernel language and what Python's operators and functions mean in it.

*Static* values are Python numbers and sympy dims (``x.shape[0]``, ``n - 1``), folded while
building; *run-time* values (``Val``) are loop-level expressions, weak when they stand for a
Python scalar (NEP 50).  Operators and math functions are typed by NumPy's ufunc rules.
"""
from __future__ import annotations

import ast
import builtins
import math as pymath
import operator

import numpy as np
import sympy

from .. import dtypes as dt
from ..tir import BOOL, INDEX, Const, Expr, Load, Op, Seq, from_sympy
from ..shapes import floordiv, is_symbolic, mod, normalize
from . import lang
from . import math as kmath


class Val:
    """A run-time scalar: a loop-level expression; ``weak`` for Python scalars (NEP 50)."""
    __slots__ = ("e", "weak")

    def __init__(self, e, weak=False):
        self.e, self.weak = e, weak

    @property
    def type(self):
        return (np.dtype(self.e.dtype), self.weak)


class BufRef:
    __slots__ = ("name", "buf")

    def __init__(self, name, buf):
        self.name, self.buf = name, buf


class Obj:
    """A Python object the kernel names (a module, a function, a dtype)."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _static(v) -> bool:
    return isinstance(v, (bool, int, float)) or is_symbolic(v)


def join(a, b):
    """NEP 50 promotion of two (dtype, weak) types; None is 'nothing yet'."""
    if a is None or b is None:
        return a if b is None else b
    ops = [dt.python_type_of(d) if w else np.dtype(d) for d, w in (a, b)]
    return (np.dtype(dt.result_type(*ops)), a[1] and b[1])


BOTTOM = (INDEX, True)


# ---------------------------------------------------------------------------------------
# What names mean: operators, functions
# ---------------------------------------------------------------------------------------

BINOPS = {ast.Add: ("add", "add", operator.add), ast.Sub: ("sub", "subtract", operator.sub),
          ast.Mult: ("mul", "multiply", operator.mul), ast.Div: ("div", "true_divide", operator.truediv),
          ast.FloorDiv: ("floor_div", "floor_divide", operator.floordiv),
          ast.Mod: ("rem", "remainder", operator.mod), ast.Pow: ("pow", "power", operator.pow),
          ast.BitAnd: ("and", "bitwise_and", operator.and_), ast.BitOr: ("or", "bitwise_or", operator.or_),
          ast.BitXor: ("xor", "bitwise_xor", operator.xor),
          ast.LShift: ("shift_left", "left_shift", operator.lshift),
          ast.RShift: ("shift_right", "right_shift", operator.rshift)}
_DIM_OPS = {ast.Add: lambda a, b: normalize(sympy.expand(a + b)),
            ast.Sub: lambda a, b: normalize(sympy.expand(a - b)),
            ast.Mult: lambda a, b: normalize(sympy.expand(a * b)), ast.FloorDiv: floordiv, ast.Mod: mod}
CMPS = {ast.Lt: ("lt", "less", operator.lt), ast.LtE: ("le", "less_equal", operator.le),
        ast.Gt: ("gt", "greater", operator.gt), ast.GtE: ("ge", "greater_equal", operator.ge),
        ast.Eq: ("eq", "equal", operator.eq), ast.NotEq: ("ne", "not_equal", operator.ne)}

UNARY: dict = {}        # function -> (loop-level op, ufunc that types it)
BINARY: dict = {}
for _op, _uf, _fns in [
        ("exp", "exp", [np.exp, pymath.exp]), ("exp2", "exp2", [np.exp2, pymath.exp2]),
        ("expm1", "expm1", [np.expm1, pymath.expm1]), ("log", "log", [np.log, pymath.log]),
        ("log2", "log2", [np.log2, pymath.log2]), ("log10", "log10", [np.log10, pymath.log10]),
        ("log1p", "log1p", [np.log1p, pymath.log1p]), ("sqrt", "sqrt", [np.sqrt, pymath.sqrt]),
        ("sin", "sin", [np.sin, pymath.sin]), ("cos", "cos", [np.cos, pymath.cos]),
        ("tan", "tan", [np.tan, pymath.tan]), ("asin", "arcsin", [np.arcsin, pymath.asin]),
        ("acos", "arccos", [np.arccos, pymath.acos]), ("atan", "arctan", [np.arctan, pymath.atan]),
        ("sinh", "sinh", [np.sinh, pymath.sinh]), ("cosh", "cosh", [np.cosh, pymath.cosh]),
        ("tanh", "tanh", [np.tanh, pymath.tanh]), ("asinh", "arcsinh", [np.arcsinh, pymath.asinh]),
        ("acosh", "arccosh", [np.arccosh, pymath.acosh]), ("atanh", "arctanh", [np.arctanh, pymath.atanh]),
        ("erf", "exp", [kmath.erf, pymath.erf]), ("floor", "floor", [np.floor, pymath.floor]),
        ("ceil", "ceil", [np.ceil, pymath.ceil]), ("trunc", "trunc", [np.trunc, pymath.trunc]),
        ("abs", "absolute", [builtins.abs, np.abs, np.fabs, pymath.fabs]),
        ("is_nan", "isnan", [np.isnan, pymath.isnan]), ("is_inf", "isinf", [np.isinf, pymath.isinf]),
        ("is_finite", "isfinite", [np.isfinite, pymath.isfinite])]:
    for _f in _fns:
        UNARY[_f] = (_op, _uf)
for _op, _uf, _fns in [("atan2", "arctan2", [np.arctan2, pymath.atan2]),
                       ("pow", "power", [np.power, pymath.pow, builtins.pow]),
                       ("max", "maximum", [np.maximum, builtins.max]),
                       ("min", "minimum", [np.minimum, builtins.min]),
                       # NumPy's arithmetic ufuncs as functions: a kernel's combining step
                       # passed as a value (ragged_segments' reductions)
                       ("add", "add", [np.add]), ("sub", "subtract", [np.subtract]),
                       ("mul", "multiply", [np.multiply]), ("div", "true_divide", [np.true_divide])]:
    for _f in _fns:
        BINARY[_f] = (_op, _uf)
_CAST_TYPES = set(lang.CASTS.values())
_SUPPORTED_CALLS = ("range/rj.prange/rj.grid (in for), min, max, abs, pow, len, float, int, bool, "
                    "np.add/subtract/multiply/true_divide, casts "
                    "(rj.float32(v), ...), rj.math.* and math.* functions")


def cast(v: Val, dtype) -> Expr:
    dtype = np.dtype(dtype)
    if v.e.dtype == dtype:
        return v.e
    if isinstance(v.e, Const):
        with np.errstate(all="ignore"):
            value = np.array(v.e.value).astype(dtype)[()].item()
        return Const(value, dtype)
    return Op("convert", (v.e,), dtype)


def lift(v) -> Val:
    if isinstance(v, Val):
        return v
    if isinstance(v, bool):
        return Val(Const(v, BOOL), True)
    if isinstance(v, int):
        return Val(Const(v, INDEX), True)
    if isinstance(v, float):
        return Val(Const(v, np.dtype("float64")), True)
    if is_symbolic(v):
        return Val(from_sympy(v), True)
    raise TypeError(v)


def _has_load(e) -> bool:
    if isinstance(e, Load):
        return True
    return isinstance(e, Op) and any(_has_load(a) for a in e.args)


def seq(stmts: list):
    stmts = [s for s in stmts if s is not None]
    return stmts[0] if len(stmts) == 1 else Seq(stmts)
