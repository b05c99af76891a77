"""LLVM IR for loop-level scalar ops: one table, ``SCALAR_OPS``, op name -> renderer.

A renderer gets the kernel emitter (for SSA values, helper declarations and constants) and
an ``Operands`` record, and returns the SSA value of the result.  NumPy's semantics are kept
where C's differ: integer division and modulo floor (and give 0 for a zero divisor), shifts
past the bit width give 0 (or -1), max/min propagate NaN, float-to-int conversions
follow NumPy on x86-64.  Math functions (``scalar_math.MATH``) call libm, vectorized through libmvec.
Adding an elementwise primitive that needs a new scalar instruction adds one entry here.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ...tir import BOOL, Op
from ..scalar_math import MATH
from . import mathlib
from .irtypes import BITS, FLOAT_RANK, fconst, is_float, llty, signed, suffix
from ...op_table import registrar


@dataclass
class Operands:
    """An op's operands and the facts every renderer asks about them."""
    em: object               # the KernelEmitter (fn, helpers_used, math_used, _const)
    e: Op
    name: str                # the op rendered: bool + - * are or, xor, and
    args: list               # SSA values of the operands
    ty: str                  # LLVM type of the result
    sty: str                 # LLVM type of the first operand
    src: np.dtype            # dtype of the first operand
    flt: bool
    sgn: bool
    fm: str                  # " reassoc" on a reorderable float reduction update

    def v(self, instr: str) -> str:
        return self.em.fn.val(self.ty, instr)

    def const(self, value) -> str:
        return self.em._const(value, self.src)


SCALAR_OPS: dict[str, Callable[[Operands], str]] = {}


renders = registrar(SCALAR_OPS)


# bool arithmetic as NumPy defines it: + is or, * is and, - is xor
_BOOL_ARITH = {"add": "or", "mul": "and", "sub": "xor"}


def render_op(em, e: Op, args: list) -> str:
    src = np.dtype(e.args[0].dtype)
    name = _BOOL_ARITH.get(e.name, e.name) if src == BOOL else e.name
    ops = Operands(em, e, name, args, llty(e.dtype), llty(src), src, is_float(src), signed(src),
                   " reassoc" if "reassoc" in e.flags and is_float(src) else "")
    rule = SCALAR_OPS.get(name)
    if rule is None:
        raise NotImplementedError(f"the LLVM backend has no lowering for {name!r} on {src}")
    return rule(ops)


@renders("convert")
def _convert_op(o: Operands) -> str:
    return convert(o.em, o.args[0], o.src, o.e.dtype)


@renders("add", "sub", "mul")
def _arith(o: Operands) -> str:
    return o.v(f"{'f' if o.flt else ''}{o.name}{o.fm} {o.ty} {o.args[0]}, {o.args[1]}")


@renders("div")
def _div(o: Operands) -> str:
    return o.v(f"fdiv {o.ty} {o.args[0]}, {o.args[1]}")


@renders("floor_div", "rem")
def _floor_div_rem_op(o: Operands) -> str:
    return floor_div_rem(o.em, o.name, o.args, o.src, nonneg=o.em.operands_nonneg(o.e))


@renders("and", "or", "xor")
def _bitwise(o: Operands) -> str:
    return o.v(f"{o.name} {o.ty} {o.args[0]}, {o.args[1]}")


@renders("max", "min")
def _max_min(o: Operands) -> str:
    name = o.name
    if o.src == BOOL:
        return o.v(f"{'or' if name == 'max' else 'and'} i1 {o.args[0]}, {o.args[1]}")
    intr = (f"llvm.{name}imum" if o.flt else f"llvm.{'s' if o.sgn else 'u'}{name}") + f".{suffix(o.sty)}"
    o.em.helpers_used.add(f"declare {o.ty} @{intr}({o.ty}, {o.ty})")
    return o.v(f"call{o.fm} {o.ty} @{intr}({o.ty} {o.args[0]}, {o.ty} {o.args[1]})")


_FCMP = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}


@renders("eq", "ne", "lt", "le", "gt", "ge")
def _compare(o: Operands) -> str:
    name = o.name
    if o.flt:
        return o.v(f"fcmp {_FCMP[name]} {o.sty} {o.args[0]}, {o.args[1]}")
    pred = {"eq": "eq", "ne": "ne"}.get(name) or \
        ("s" if o.sgn else "u") + name[0] + ("t" if name[1] == "t" else "e")
    return o.v(f"icmp {pred} {o.sty} {o.args[0]}, {o.args[1]}")


@renders("select")
def _select(o: Operands) -> str:
    return o.v(f"select i1 {o.args[0]}, {o.ty} {o.args[1]}, {o.ty} {o.args[2]}")


@renders("neg")
def _neg(o: Operands) -> str:
    return o.v(f"fneg {o.ty} {o.args[0]}") if o.flt else o.v(f"sub {o.ty} 0, {o.args[0]}")


@renders("not")
def _not(o: Operands) -> str:
    return o.v(f"xor {o.ty} {o.args[0]}, {'true' if o.src == BOOL else -1}")


@renders("abs")
def _abs(o: Operands) -> str:
    if o.flt:
        return intrinsic(o.em, "fabs", o.ty, o.args)
    if not o.sgn:
        return o.args[0]
    o.em.helpers_used.add(f"declare {o.ty} @llvm.abs.{o.ty}({o.ty}, i1)")
    return o.v(f"call {o.ty} @llvm.abs.{o.ty}({o.ty} {o.args[0]}, i1 false)")


@renders("sign")
def _sign(o: Operands) -> str:
    fn, ty, x = o.em.fn, o.ty, o.args[0]
    zero, one = o.const(0), o.const(1)
    m1 = o.const(-1) if o.sgn or o.flt else "0"
    gt = fn.val("i1", f"{'fcmp ogt' if o.flt else ('icmp sgt' if o.sgn else 'icmp ugt')} {ty} {x}, {zero}")
    lt = fn.val("i1", f"{'fcmp olt' if o.flt else 'icmp slt'} {ty} {x}, {zero}") if o.sgn or o.flt else "false"
    rest = o.v(f"select i1 {lt}, {ty} {m1}, {ty} {x if o.flt else zero}")
    return o.v(f"select i1 {gt}, {ty} {one}, {ty} {rest}")


@renders("floor", "ceil", "trunc", "round")
def _rounding(o: Operands) -> str:
    if not o.flt:
        return o.args[0]
    return intrinsic(o.em, {"round": "roundeven"}.get(o.name, o.name), o.ty, o.args)


@renders("sqrt")
def _sqrt(o: Operands) -> str:
    return intrinsic(o.em, "sqrt", o.ty, o.args)


@renders("reciprocal")
def _reciprocal(o: Operands) -> str:
    if o.flt:
        return o.v(f"fdiv {o.ty} {o.const(1)}, {o.args[0]}")
    return floor_div_rem(o.em, "trunc_div", [o.const(1), o.args[0]], o.src)


@renders("is_nan")
def _is_nan(o: Operands) -> str:
    return o.v(f"fcmp uno {o.sty} {o.args[0]}, {o.args[0]}") if o.flt else "false"


@renders("is_inf", "is_finite")
def _is_inf_finite(o: Operands) -> str:
    if not o.flt:
        return "false" if o.name == "is_inf" else "true"
    a = intrinsic(o.em, "fabs", o.sty, o.args)
    return o.v(f"fcmp {'oeq' if o.name == 'is_inf' else 'olt'} {o.sty} {a}, {fconst(float('inf'), o.sty)}")


@renders("shift_left", "shift_right")
def _shift(o: Operands) -> str:
    fn, ty, (x, n) = o.em.fn, o.ty, o.args
    inr = fn.val("i1", f"icmp ult {ty} {n}, {BITS[ty]}")
    if o.name == "shift_left":
        sh = o.v(f"shl {ty} {x}, {n}")
        return o.v(f"select i1 {inr}, {ty} {sh}, {ty} 0")
    sh = o.v(f"{'ashr' if o.sgn else 'lshr'} {ty} {x}, {n}")
    if o.sgn:
        neg = fn.val("i1", f"icmp slt {ty} {x}, 0")
        out = o.v(f"select i1 {neg}, {ty} -1, {ty} 0")
    else:
        out = "0"
    return o.v(f"select i1 {inr}, {ty} {sh}, {ty} {out}")


@renders("pow")
def _pow(o: Operands) -> str:
    if o.flt:
        return _math(o)
    o.em.helpers_used.add(("ipow", o.ty))
    return o.v(f"call {o.ty} @rj.ipow.{o.ty}({o.ty} {o.args[0]}, {o.ty} {o.args[1]})")


def _math(o: Operands) -> str:
    """A libm call (float16 computes in float32, then rounds)."""
    fn, ty, args = o.em.fn, o.ty, o.args
    work = ty if ty != "half" else "float"
    if ty == "half":
        args = [fn.val("float", f"fpext half {a} to float") for a in args]
    o.em.math_used.add((o.name, work))
    sym = mathlib.libm_name(o.name, work)
    r = fn.val(work, f"call {work} @{sym}({', '.join(f'{work} {a}' for a in args)})")
    return fn.val("half", f"fptrunc float {r} to half") if ty == "half" else r


# exp underflows to exactly 0 below these (its value is under half the smallest subnormal)
EXP_ZERO_BELOW = {"float": -104.0, "double": -746.0}


@renders("exp")
def _exp(o: Operands) -> str:
    """libm's exp, except that arguments far enough below give 0 without calling it:
    libmvec's vector exp takes a scalar path lane by lane for such arguments (a softmax's
    -inf or -1e9 mask made exp 4-7x slower); below ``EXP_ZERO_BELOW`` the correctly rounded
    result is 0 anyway.  NaN compares false and goes to exp as before."""
    if o.ty not in EXP_ZERO_BELOW:
        return _math(o)
    fn, ty = o.em.fn, o.ty
    under = fn.val("i1", f"fcmp olt {ty} {o.args[0]}, {EXP_ZERO_BELOW[ty]:.1f}")
    safe = fn.val(ty, f"select i1 {under}, {ty} 0.0, {ty} {o.args[0]}")
    r = _math(replace(o, args=[safe]))
    return fn.val(ty, f"select i1 {under}, {ty} 0.0, {ty} {r}")


for _name in MATH:          # libm calls, except where an entry above says otherwise (pow)
    SCALAR_OPS.setdefault(_name, _math)


def intrinsic(em, name: str, ty: str, args: list) -> str:
    em.helpers_used.add(f"declare {ty} @llvm.{name}.{suffix(ty)}({', '.join([ty] * len(args))})")
    return em.fn.val(ty, f"call {ty} @llvm.{name}.{suffix(ty)}({', '.join(f'{ty} {a}' for a in args)})")


def convert(em, x: str, src, dst) -> str:
    fn = em.fn
    s, d = llty(src), llty(dst)
    if src == dst:
        return x
    if dst == BOOL:
        return fn.val("i1", f"fcmp une {s} {x}, 0.0") if is_float(src) else \
            fn.val("i1", f"icmp ne {s} {x}, 0")
    if is_float(src) and is_float(dst):
        if s == d:
            return x
        op = "fpext" if FLOAT_RANK[d] > FLOAT_RANK[s] else "fptrunc"
        return fn.val(d, f"{op} {s} {x} to {d}")
    if is_float(dst):
        op = "sitofp" if signed(src) else "uitofp"
        return fn.val(d, f"{op} {s} {x} to {d}")
    if is_float(src):
        return _float_to_int(em, x, s, d, np.dtype(dst))
    bs, bd = BITS[s], BITS[d]
    if bs == bd:
        return x
    if bd < bs:
        return fn.val(d, f"trunc {s} {x} to {d}")
    return fn.val(d, f"{'sext' if signed(src) else 'zext'} {s} {x} to {d}")


def _float_to_int(em, x: str, s: str, d: str, dst: np.dtype) -> str:
    """Float -> integer as NumPy on x86-64 (C casts compiled to cvttss2si/cvttsd2si): a value
    in range truncates; an out-of-range one or NaN gives the instruction's "indefinite
    integer" INT_MIN of its width.  int64 and int32 convert at their width; narrower types
    through int32 and wrap (300.0 -> uint8 44, inf -> 0); uint32/uint64 subtract 2**31 /
    2**63 from values at or above it and flip the top bit back.  LLVM's fptosi is poison out
    of range, so every conversion is guarded."""
    fn = em.fn
    if s == "half":              # NumPy converts half through float, to uint32 through int64
        x, s = fn.val("float", f"fpext half {x} to float"), "float"
        if dst == np.uint32:
            return fn.val(d, f"trunc i64 {_cvtt(em, x, s, 'i64')} to {d}")
    if dst.kind == "u" and dst.itemsize >= 4:
        w = "i64" if dst.itemsize == 8 else "i32"
        top = 2.0 ** (BITS[w] - 1)
        big = fn.val("i1", f"fcmp oge {s} {x}, {fconst(top, s)}")
        low = fn.val(s, f"fsub {s} {x}, {fconst(top, s)}")
        y = _cvtt(em, fn.val(s, f"select i1 {big}, {s} {low}, {s} {x}"), s, w)
        flipped = fn.val(w, f"xor {w} {y}, {-(1 << (BITS[w] - 1))}")
        return fn.val(w, f"select i1 {big}, {w} {flipped}, {w} {y}")
    w = "i64" if d == "i64" else "i32"
    y = _cvtt(em, x, s, w)
    return y if d == w else fn.val(d, f"trunc {w} {y} to {d}")


def _cvtt(em, x: str, s: str, w: str) -> str:
    """x86's truncating conversion to ``w``: INT_MIN of the width when out of range or NaN."""
    fn = em.fn
    top = 2.0 ** (BITS[w] - 1)
    ge = fn.val("i1", f"fcmp oge {s} {x}, {fconst(-top, s)}")
    lt = fn.val("i1", f"fcmp olt {s} {x}, {fconst(top, s)}")
    ok = fn.val("i1", f"and i1 {ge}, {lt}")
    safe = fn.val(s, f"select i1 {ok}, {s} {x}, {s} 0.0")
    v = fn.val(w, f"fptosi {s} {safe} to {w}")
    return fn.val(w, f"select i1 {ok}, {w} {v}, {w} {-(1 << (BITS[w] - 1))}")


def floor_div_rem(em, name: str, args: list, dtype, nonneg: bool = False) -> str:
    """NumPy's floor division and modulo (and C's truncating division for reciprocal).
    ``nonneg``: both operands are known >= 0 (index arithmetic over dims and loop
    counters), where floor and truncation agree and an unsigned division does."""
    fn = em.fn
    ty = llty(dtype)
    a, b = args
    if is_float(dtype):
        em.helpers_used.add((name, ty))
        return fn.val(ty, f"call {ty} @rj.{name}.{ty}({ty} {a}, {ty} {b})")
    if dtype == BOOL:
        raise NotImplementedError(f"{name} on bool")
    instr = "urem" if name == "rem" else "udiv"
    if nonneg and b.lstrip("-").isdigit() and int(b) > 0:
        return fn.val(ty, f"{instr} {ty} {a}, {b}")
    zero = fn.val("i1", f"icmp eq {ty} {b}, 0")
    if not signed(dtype) or nonneg:
        safe = fn.val(ty, f"select i1 {zero}, {ty} 1, {ty} {b}")
        r = fn.val(ty, f"{'urem' if name == 'rem' else 'udiv'} {ty} {a}, {safe}")
        return fn.val(ty, f"select i1 {zero}, {ty} 0, {ty} {r}")
    # a divisor of -1 would overflow on INT_MIN: divide by 1 and negate (wrapping) instead
    m1 = fn.val("i1", f"icmp eq {ty} {b}, -1")
    bad = fn.val("i1", f"or i1 {zero}, {m1}")
    safe = fn.val(ty, f"select i1 {bad}, {ty} 1, {ty} {b}")
    q = fn.val(ty, f"sdiv {ty} {a}, {safe}")
    r = fn.val(ty, f"srem {ty} {a}, {safe}")
    if name == "trunc_div":
        q = fn.val(ty, f"select i1 {m1}, {ty} {fn.val(ty, f'sub {ty} 0, {a}')}, {ty} {q}")
        return fn.val(ty, f"select i1 {zero}, {ty} 0, {ty} {q}")
    rnz = fn.val("i1", f"icmp ne {ty} {r}, 0")
    rneg = fn.val("i1", f"icmp slt {ty} {r}, 0")
    bneg = fn.val("i1", f"icmp slt {ty} {b}, 0")
    diff = fn.val("i1", f"xor i1 {rneg}, {bneg}")
    adj = fn.val("i1", f"and i1 {rnz}, {diff}")
    if name == "rem":
        r2 = fn.val(ty, f"add {ty} {r}, {safe}")
        r = fn.val(ty, f"select i1 {adj}, {ty} {r2}, {ty} {r}")
        return fn.val(ty, f"select i1 {bad}, {ty} 0, {ty} {r}")
    q2 = fn.val(ty, f"sub {ty} {q}, 1")
    q = fn.val(ty, f"select i1 {adj}, {ty} {q2}, {ty} {q}")
    q = fn.val(ty, f"select i1 {m1}, {ty} {fn.val(ty, f'sub {ty} 0, {a}')}, {ty} {q}")
    return fn.val(ty, f"select i1 {zero}, {ty} 0, {ty} {q}")
