"""The vector arithmetic the attention kernels (``attention.py``) are written in: a function
builder with stack slots for loop-carried values, and vectors of one element type and width
with the online softmax's ``exp`` as a polynomial in the registers."""
from __future__ import annotations

import struct

from .gemm import Blocking, _Fn as GemmFn, _masked_load, _masked_store, _splat


class Fn(GemmFn):
    """Gemm's function builder, with stack slots (promoted to registers by the optimiser)
    for values carried around loops."""

    def slot(self, ty: str, init: str) -> str:
        p = self.local(ty)
        self.emit(f"store {ty} {init}, ptr {p}")
        return p

    def local(self, ty: str) -> str:
        """A stack slot in the entry block (not initialised)."""
        p = self.tmp()
        self.lines.insert(2, f"  {p} = alloca {ty}, align 64")
        return p

    def at(self, ty: str, base: str, *offsets: str) -> str:
        p = base
        for o in offsets:
            p = self.value(f"getelementptr inbounds {ty}, ptr {p}, i64 {o}")
        return p

    def mul(self, *xs) -> str:
        out = str(xs[0])
        for x in xs[1:]:
            out = self.value(f"mul nsw i64 {out}, {x}")
        return out

    def add(self, *xs) -> str:
        out = str(xs[0])
        for x in xs[1:]:
            out = self.value(f"add nsw i64 {out}, {x}")
        return out


class Vec:
    """Vector arithmetic of one element type and width in a function being built."""

    def __init__(self, fn: Fn, b: Blocking):
        self.fn, self.ty, self.V, self.size = fn, b.ty, b.lanes, b.size
        self.vt = f"<{b.lanes} x {b.ty}>"
        self.sfx = f"v{b.lanes}f{b.size * 8}"
        self.ivt = f"<{b.lanes} x i{b.size * 8}>"

    def const(self, x: float) -> str:
        return _splat(self.fn, self.vt, self.ty, fp_const(x, self.ty == "float"), self.V)

    def splat(self, x: str) -> str:
        return _splat(self.fn, self.vt, self.ty, x, self.V)

    def op(self, o: str, a: str, b: str) -> str:
        return self.fn.value(f"{o} {self.vt} {a}, {b}")

    def call(self, f: str, *xs: str) -> str:
        return self.fn.value(f"call {self.vt} @llvm.{f}.{self.sfx}(" + ", ".join(f"{self.vt} {x}" for x in xs) + ")")

    def fma(self, a, b, c) -> str:
        return self.call("fma", a, b, c)

    def load(self, p: str, mask: str | None = None) -> str:
        if mask is None:
            return self.fn.value(f"load {self.vt}, ptr {p}, align {self.size}")
        return _masked_load(self.fn, self.ty, self.size, self.V, p, mask)

    def store(self, x: str, p: str, mask: str | None = None) -> None:
        if mask is None:
            self.fn.emit(f"store {self.vt} {x}, ptr {p}, align {self.size}")
        else:
            _masked_store(self.fn, self.ty, self.size, self.V, x, p, mask)

    def lanes_below(self, n: str) -> str:
        """The mask of lanes ``< n``."""
        iv = f"<{self.V} x i64>"
        return self.fn.value(f"icmp slt {iv} {self.iota(0)}, {_splat(self.fn, iv, 'i64', n, self.V)}")

    def iota(self, start: str | int) -> str:
        """The i64 vector ``start, start + 1, ...`` (a constant for a constant start)."""
        iv = f"<{self.V} x i64>"
        lanes = f"<{', '.join(f'i64 {x}' for x in range(self.V))}>"
        if start == 0:
            return lanes
        return self.fn.value(f"add {iv} {lanes}, {_splat(self.fn, iv, 'i64', start, self.V)}")

    def sum(self, x: str) -> str:
        """The sum of ``x``'s lanes (in any order)."""
        return self.fn.value(f"call reassoc {self.ty} @llvm.vector.reduce.fadd.{self.sfx}({self.ty} -0.0, {self.vt} {x})")

    def exp(self, x: str) -> str:
        """e**x for x <= 0 (what a softmax takes): x = n ln2 + r (|r| <= ln2 / 2), e**r by
        a polynomial, times 2**n (``vscalef`` on AVX-512, else the exponent's bits); exactly 0
        below the smallest normal number's logarithm (-inf, the causal mask's, included);
        NaN stays NaN.  Never a subnormal: the weights feed products, and a subnormal
        operand costs a microcode assist per multiply on Intel cores (a causal attention's
        masked half made its products 5-14x slower)."""
        fn = self.fn
        single = self.ty == "float"
        V, vt = self.V, self.vt
        lo = -87.33654 if single else -708.3964
        if V * self.size == 64:        # AVX-512: 2**n by vscalef
            under = fn.value(f"fcmp olt {vt} {x}, {self.const(lo)}")
            xc = fn.value(f"select <{V} x i1> {under}, {vt} {self.const(lo)}, {vt} {x}")
            n = self.call("rint", self.op("fmul", xc, self.const(1.4426950408889634)))
            p = self._exp_reduced(xc, n)
            kind = "ps" if single else "pd"
            y = fn.value(f"call {vt} @llvm.x86.avx512.mask.scalef.{kind}.512({vt} {p}, {vt} {n}, "
                         f"{vt} zeroinitializer, i{V} -1, i32 4)")
            return fn.value(f"select <{V} x i1> {under}, {vt} zeroinitializer, {vt} {y}")
        n = self.call("rint", self.op("fmul", self.call("maxnum", x, self.const(lo)),
                                      self.const(1.4426950408889634)))
        p = self._exp_reduced(x, n)
        bits, bias, mant = (32, 127, 23) if single else (64, 1023, 52)
        ivt = self.ivt
        ni = fn.value(f"fptosi {vt} {n} to {ivt}")
        e = fn.value(f"shl {ivt} {fn.value(f'add {ivt} {ni}, {ints(bits, bias, V)}')}, {ints(bits, mant, V)}")
        y = self.op("fmul", p, fn.value(f"bitcast {ivt} {e} to {vt}"))
        under = fn.value(f"fcmp olt {vt} {x}, {self.const(lo)}")
        return fn.value(f"select <{V} x i1> {under}, {vt} zeroinitializer, {vt} {y}")

    def _exp_reduced(self, x: str, n: str) -> str:
        """e**r for r = x - n ln2 (ln2 in two parts, Cody & Waite; the first's product with
        n is exact): Cephes' polynomial for float32, Taylor's to r**13 for float64."""
        if self.ty == "float":
            r = self.fma(n, self.const(-0.693359375), x)
            r = self.fma(n, self.const(2.12194440e-4), r)
            coeffs = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                      1.6666665459e-1, 5.0000001201e-1)
            p = self.const(coeffs[0])
            for c in coeffs[1:]:
                p = self.fma(p, r, self.const(c))
            p = self.fma(p, self.op("fmul", r, r), r)
            return self.op("fadd", p, self.const(1.0))
        r = self.fma(n, self.const(-6.93145751953125e-1), x)
        r = self.fma(n, self.const(-1.42860682030941723212e-6), r)
        fact = [1.0]
        for k in range(1, 14):
            fact.append(fact[-1] * k)
        p = self.const(1.0 / fact[13])
        for k in range(12, -1, -1):
            p = self.fma(p, r, self.const(1.0 / fact[k]))
        return p


def fp_const(x: float, single: bool) -> str:
    """A constant as LLVM reads it: a double's bits in hex (for float, a float's value)."""
    if single:
        x = struct.unpack("<f", struct.pack("<f", x))[0]
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", x))[0]


def ints(bits: int, x: int, lanes: int) -> str:
    return "<" + ", ".join([f"i{bits} {x}"] * lanes) + ">"


def reciprocal(fn: Fn, ty: str, x: str) -> str:
    """1 / x, or 0 where x is 0 (no keys: the output is zeros, as NumPy's empty sum)."""
    inv = fn.value(f"fdiv {ty} 1.0, {x}")
    return fn.value(f"select i1 {fn.value(f'fcmp oeq {ty} {x}, 0.0')}, {ty} 0.0, {ty} {inv}")
