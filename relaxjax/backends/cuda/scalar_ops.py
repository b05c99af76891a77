"""CUDA C for loop-level scalar ops: one table, ``SCALAR_OPS``, op name -> renderer, and the
C types and literals of NumPy dtypes.

A renderer gets an ``Operands`` record (the op, its operands' C expressions, the C type of
the result) and returns a C expression.  NumPy's semantics where C's differ come from the
prelude's ``rj_*`` helpers (floor division and modulo, wrapping int32 arithmetic, shifts,
NaN-propagating max/min, saturating float-to-int conversions); float16 values compute in
float and round after every operation.  Math functions (``scalar_math.MATH``) call CUDA's
device library.  Adding an elementwise primitive that needs a new scalar instruction adds
one entry here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...tir import BOOL, INDEX, Op
from ..scalar_math import MATH, libm_name
from ...op_table import registrar

_CTYPE = {"bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
          "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
          "float16": "float", "float32": "float", "float64": "double"}
_MEMTYPE = dict(_CTYPE, bool="uint8_t", float16="uint16_t")


class CudaCodegenError(NotImplementedError):
    """A loop-level program the CUDA code generator cannot express."""


def ctype(dtype) -> str:
    """The C type a value of ``dtype`` has in registers (float16 computes in float)."""
    return _CTYPE[np.dtype(dtype).name]


def memtype(dtype) -> str:
    return _MEMTYPE[np.dtype(dtype).name]


def c_const(v, dtype) -> str:
    """``v`` as a C literal of ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return "true" if v else "false"
    if dtype.kind == "f":
        x = float(np.array(v, dtype))
        single = dtype != np.float64
        if np.isnan(x):
            return "RJ_NAN_F" if single else "RJ_NAN_D"
        if np.isinf(x):
            inf = "RJ_INF_F" if single else "RJ_INF_D"
            return inf if x > 0 else f"(-{inf})"
        return f"{x.hex()}{'f' if single else ''}"
    v = int(np.array(int(v)).astype(dtype)) if dtype.kind in "iu" else int(v)
    if dtype == np.int64:
        return f"{v}LL" if v != -2 ** 63 else "(-9223372036854775807LL - 1)"
    if dtype == np.uint64:
        return f"{v}ULL"
    return f"(({ctype(dtype)}){v})" if dtype.kind == "i" else f"(({ctype(dtype)}){v}u)"


@dataclass
class Operands:
    e: Op
    a: list                  # the operands' C expressions
    src: np.dtype            # dtype of the first operand
    dtype: np.dtype          # dtype of the result
    ct: str                  # C type of the result

    @property
    def flt(self) -> bool:
        return self.src.kind == "f"

    def h(self, x: str) -> str:
        """float16 results round after each operation."""
        return f"rj_h({x})" if self.dtype == np.float16 else x

    def f(self) -> str:
        """The suffix of the float32 versions of C math functions."""
        return "f" if self.src != np.float64 else ""


SCALAR_OPS: dict[str, Callable[[Operands], str]] = {}


renders = registrar(SCALAR_OPS)


def render_op(e: Op, a: list) -> str:
    src, dtype = np.dtype(e.args[0].dtype), np.dtype(e.dtype)
    rule = SCALAR_OPS.get(e.name)
    if rule is None:
        raise CudaCodegenError(f"the CUDA backend has no lowering for {e.name!r} on {src}")
    return rule(Operands(e, a, src, dtype, ctype(dtype)))


@renders("select", "if_then_else")
def _select(o: Operands) -> str:
    c, x, y = o.a              # a C conditional evaluates only the branch it takes
    return f"({c} ? {x} : {y})"


@renders("convert")
def _convert_op(o: Operands) -> str:
    return convert(o.a[0], o.src, o.dtype)


_ARITH = {"add": "+", "sub": "-", "mul": "*"}
_BOOL_ARITH = {"add": "|", "mul": "&", "sub": "^"}


@renders("add", "sub", "mul")
def _arith(o: Operands) -> str:
    name, a = o.e.name, o.a
    if o.src == BOOL:
        return f"({a[0]} {_BOOL_ARITH[name]} {a[1]})"
    if o.flt or o.src == INDEX:
        return o.h(f"({a[0]} {_ARITH[name]} {a[1]})")
    if o.src.kind == "i" and o.src.itemsize == 4:
        return f"rj_{name}({a[0]}, {a[1]})"
    return f"(({o.ct})({a[0]} {_ARITH[name]} {a[1]}))"


@renders("div")
def _div(o: Operands) -> str:
    return o.h(f"({o.a[0]} / {o.a[1]})")


@renders("floor_div", "rem")
def _floor_div_rem(o: Operands) -> str:
    fn = "rj_floordiv" if o.e.name == "floor_div" else "rj_mod"
    return o.h(f"{fn}({o.a[0]}, {o.a[1]})") if o.flt else f"{fn}<{o.ct}>({o.a[0]}, {o.a[1]})"


_BITWISE = {"and": "&", "or": "|", "xor": "^"}


@renders("and", "or", "xor")
def _bitwise(o: Operands) -> str:
    a, sym = o.a, _BITWISE[o.e.name]
    return f"({a[0]} {sym} {a[1]})" if o.src == BOOL else f"(({o.ct})({a[0]} {sym} {a[1]}))"


@renders("max", "min")
def _max_min(o: Operands) -> str:
    return f"rj_{o.e.name}(({o.ct}){o.a[0]}, ({o.ct}){o.a[1]})"


_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


@renders(*_CMP)
def _compare(o: Operands) -> str:
    return f"({o.a[0]} {_CMP[o.e.name]} {o.a[1]})"


@renders("neg")
def _neg(o: Operands) -> str:
    if o.flt:
        return f"(-{o.a[0]})"
    return f"rj_neg<{o.ct}>({o.a[0]})" if o.src.kind in "iu" else f"(!{o.a[0]})"


@renders("not")
def _not(o: Operands) -> str:
    return f"(!{o.a[0]})" if o.src == BOOL else f"(({o.ct})~{o.a[0]})"


@renders("abs")
def _abs(o: Operands) -> str:
    x = o.a[0]
    if o.flt:
        return f"fabs{o.f()}({x})"
    if o.src.kind == "u" or o.src == BOOL:
        return x
    return f"({x} < 0 ? rj_neg<{o.ct}>({x}) : {x})"


@renders("sign")
def _sign(o: Operands) -> str:
    x = o.a[0]
    if o.src == BOOL:
        return x
    zero, one = c_const(0, o.src), c_const(1, o.src)
    m1 = c_const(-1, o.src) if o.src.kind != "u" else zero
    rest = x if o.flt else zero
    return f"({x} > {zero} ? {one} : ({x} < {zero} ? {m1} : {rest}))"


@renders("floor", "ceil", "trunc", "round")
def _rounding(o: Operands) -> str:
    if not o.flt:
        return o.a[0]
    fn = "rint" if o.e.name == "round" else o.e.name
    return f"{fn}{o.f()}({o.a[0]})"


@renders("sqrt")
def _sqrt(o: Operands) -> str:
    return o.h(f"sqrt{o.f()}({o.a[0]})")


@renders("reciprocal")
def _reciprocal(o: Operands) -> str:
    if o.flt:
        return o.h(f"({c_const(1, o.src)} / {o.a[0]})")
    return f"rj_truncdiv<{o.ct}>(({o.ct})1, {o.a[0]})"


@renders("is_nan")
def _is_nan(o: Operands) -> str:
    return f"rj_isnan({o.a[0]})" if o.flt else "false"


@renders("is_inf")
def _is_inf(o: Operands) -> str:
    return f"rj_isinf({o.a[0]})" if o.flt else "false"


@renders("is_finite")
def _is_finite(o: Operands) -> str:
    return f"(!rj_isinf({o.a[0]}) && !rj_isnan({o.a[0]}))" if o.flt else "true"


@renders("shift_left", "shift_right")
def _shift(o: Operands) -> str:
    return f"rj_sh{'l' if o.e.name == 'shift_left' else 'r'}<{o.ct}>({o.a[0]}, {o.a[1]})"


@renders("pow")
def _pow(o: Operands) -> str:
    if o.flt:
        return _math(o)
    return f"rj_ipow<{o.ct}>({o.a[0]}, {o.a[1]})"


def _math(o: Operands) -> str:
    return o.h(f"{libm_name(o.e.name, o.src != np.float64)}({', '.join(o.a)})")


for _name in MATH:          # libm calls, except where an entry above says otherwise (pow)
    SCALAR_OPS.setdefault(_name, _math)


def convert(x: str, src, dst) -> str:
    src, dst = np.dtype(src), np.dtype(dst)
    cd = ctype(dst)
    if src == dst:
        return x
    if dst == BOOL:
        return f"({x} != 0)"
    if dst.kind == "f":
        if dst == np.float16:
            return f"rj_h((float){x})"
        return f"(({cd}){x})"
    if src.kind == "f":
        if src == np.float16 and dst == np.uint32:       # NumPy: through int64
            return f"((uint32_t)rj_f2i64({x}))"
        f = {8: "rj_f2u64", 4: "rj_f2u32"}.get(dst.itemsize) if dst.kind == "u" else \
            "rj_f2i64" if dst.itemsize == 8 else None
        return f"{f}({x})" if f else f"(({cd})rj_f2i32({x}))"
    return f"(({cd}){x})"
