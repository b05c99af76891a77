"""Attention that never builds the score matrix: the native ``nn.attention_*`` library
functions of :mod:`relaxjax.attention`, generated as LLVM IR.

``out = softmax(q k^T * scale [causal]) v`` per (batch, head), for ``q`` (B, T, N, H),
``k`` (B, S, K, H), ``v`` (B, S, K, Hv) and ``out`` (B, T, N, Hv), with ``K`` dividing ``N``
(query head ``n`` reads key/value head ``n // (N / K)``).  The work is split into items,
a block of ``BQ`` queries of one head each, claimed by the OpenMP team's threads from a
shared counter (the heaviest blocks of a causal product first).  A block runs one of two
schedules:

* tiled (FlashAttention's, Dao et al. 2022, on a CPU's registers): the block's queries,
  scaled, are packed transposed (``Qt``: H x BQ); for each block of ``BK`` keys the scores
  are formed *transposed*, ``St = K_blk Qt`` (BK x BQ, in cache, by the matrix product's
  micro-kernel reading K's rows as they are), so that the online softmax runs down the
  columns, one vector of queries at a time, with no horizontal reductions: each column's
  running maximum ``m`` and sum ``l``, ``P = exp(St - m)`` in place, and the accumulated
  output ``Ot`` (Hv x BQ) rescaled by ``exp(m_old - m)``; then ``Ot += V_blk^T P`` (the
  micro-kernel reading V's columns as they are).  The end divides by ``l`` and writes the
  block's rows.  A causal product stops at the block's last query (the loop bound) and
  masks the scores above the diagonal inside the last key blocks.
* row by row, for blocks of at most ``ROW_MAX`` queries (decoding: one query against a
  growing cache): the scores of one query (a dot product per key) in a buffer, their
  softmax, then the output accumulated a register block of columns at a time.

Sizes are run-time integers (one function for every shape); ``exp`` is a polynomial
evaluated in the vector registers (Cephes' ``expf`` for float32; degree 13 for float64).
The ``lengths`` variants take one or two more inputs before ``out``: ``lengths`` (B,) int32,
batch ``b`` attending to its first ``lengths[b]`` keys only (clamped to [0, S]; none:
zeros), the loops stopping there (a decode step over a preallocated cache reads the filled
part); then ``query_lengths`` (B,) int32, batch ``b``'s queries from ``query_lengths[b]`` on
giving zeros, not computed (a batch of sequences of different lengths, padded).
"""
from __future__ import annotations

import functools
import struct

from ...library import loader
from . import target
from .engine import compile_llvm, generated_products, prepare_process
from .gemm import (DECLARATIONS as GEMM_DECLARATIONS, Blocking, _Fn as GemmFn, _masked_load,
                   _masked_store, _micro_kernel, _min, _splat, blocking, team_wanted)

ROW_MAX = 8          # a block of this many queries or fewer runs row by row
BQ = 48              # queries per block (a multiple of every micro-tile width NR; two
                     # threads share a sequence of 1024 more evenly in blocks of 48 than of 96)
BK = {"s": 128, "d": 64}          # keys per block: the scores, BK x BQ, stay in L1/L2
PARALLEL_MIN_MACS = 1 << 20       # less work than this runs on the calling thread
# the work item counter and the arguments, in the context the workers share
ARGS = ("B", "T", "N", "H", "S", "K", "Hv", "q", "k", "v", "out", "scale", "items", "nqb", "next")
# the arrays, by their index in the library call, and the dims read from its shapes
ARRAYS = {"q": 0, "k": 1, "v": 2, "scale": 3, "out": 4}
DIMS = {"B": 0, "T": 1, "N": 2, "H": 3, "S": 5, "K": 6, "Hv": 11}


def symbol(dtype_char: str, causal: bool, lengths: int = 0) -> str:
    """``lengths``: 0, 1 (key lengths) or 2 (key and query lengths)."""
    return f"rj_attention_{dtype_char}{'_causal' if causal else ''}{['', '_lengths', '_qlengths'][lengths]}"


class _Fn(GemmFn):
    """Gemm's function builder, with stack slots (promoted to registers by the optimiser)
    for values carried around loops."""

    def slot(self, ty: str, init: str) -> str:
        p = self.tmp()
        self.lines.insert(2, f"  {p} = alloca {ty}, align 64")
        self.emit(f"store {ty} {init}, ptr {p}")
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


class _Vec:
    """Vector arithmetic of one element type and width in a function being built."""

    def __init__(self, fn: _Fn, b: Blocking):
        self.fn, self.ty, self.V, self.size = fn, b.ty, b.lanes, b.size
        self.vt = f"<{b.lanes} x {b.ty}>"
        self.sfx = f"v{b.lanes}f{b.size * 8}"
        self.ivt = f"<{b.lanes} x i{b.size * 8}>"

    def const(self, x: float) -> str:
        return _splat(self.fn, self.vt, self.ty, _fp(x, self.ty == "float"), self.V)

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
        e = fn.value(f"shl {ivt} {fn.value(f'add {ivt} {ni}, {_ints(bits, bias, V)}')}, {_ints(bits, mant, V)}")
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


def _fp(x: float, single: bool) -> str:
    """A constant as LLVM reads it: a double's bits in hex (for float, a float's value)."""
    if single:
        x = struct.unpack("<f", struct.pack("<f", x))[0]
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", x))[0]


def _ints(bits: int, x: int, lanes: int) -> str:
    return "<" + ", ".join([f"i{bits} {x}"] * lanes) + ">"


def _row_by_row(fn: _Fn, vec: _Vec, causal: bool, a: dict, item: dict, ws: dict) -> None:
    """The block's queries one at a time: scores in ``buf``, their softmax, then the output
    a register block of four vectors of columns at a time."""
    ty, V = vec.ty, vec.V
    ninf = _fp(float("-inf"), ty == "float")

    def per_row(r):
        qi = fn.add(item["q0"], r)
        kend = _min(fn, item["S"], fn.add(qi, 1)) if causal else item["S"]
        qp = fn.at(ty, a["q"], item["qoff"], fn.mul(r, item["ldq"]))
        mx = fn.slot(ty, ninf)

        def score(j):
            kp = fn.at(ty, a["k"], item["koff"], fn.mul(j, item["ldk"]))
            acc = fn.slot(vec.vt, "zeroinitializer")

            def chunk(h):
                mask = vec.lanes_below(fn.value(f"sub nsw i64 {a['H']}, {h}"))
                x = vec.load(fn.at(ty, qp, h), mask)
                y = vec.load(fn.at(ty, kp, h), mask)
                fn.emit(f"store {vec.vt} {vec.fma(x, y, fn.value(f'load {vec.vt}, ptr {acc}'))}, ptr {acc}")
            fn.loop("0", a["H"], V, chunk)
            s = fn.value(f"fmul {ty} {vec.sum(fn.value(f'load {vec.vt}, ptr {acc}'))}, {a['scale']}")
            fn.emit(f"store {ty} {s}, ptr {fn.at(ty, ws['buf'], j)}")
            m = fn.value(f"call {ty} @llvm.maxnum.f{vec.size * 8}({ty} {s}, {ty} {fn.value(f'load {ty}, ptr {mx}')})")
            fn.emit(f"store {ty} {m}, ptr {mx}")
        fn.loop("0", kend, 1, score)
        mxv = vec.splat(fn.value(f"load {ty}, ptr {mx}"))
        total = fn.slot(vec.vt, "zeroinitializer")

        def softmax(j):
            mask = vec.lanes_below(fn.value(f"sub nsw i64 {kend}, {j}"))
            p = fn.at(ty, ws["buf"], j)
            e = vec.exp(vec.op("fsub", vec.load(p, mask), mxv))
            e = fn.value(f"select <{V} x i1> {mask}, {vec.vt} {e}, {vec.vt} zeroinitializer")
            vec.store(e, p, mask)
            fn.emit(f"store {vec.vt} {vec.op('fadd', e, fn.value(f'load {vec.vt}, ptr {total}'))}, ptr {total}")
        fn.loop("0", kend, V, softmax)
        rl = _reciprocal(fn, ty, vec.sum(fn.value(f"load {vec.vt}, ptr {total}")))
        rlv = vec.splat(rl)

        def columns(hc):
            masks = [vec.lanes_below(fn.value(f"sub nsw i64 {a['Hv']}, {fn.add(hc, c * V)}")) for c in range(4)]
            accs = [fn.slot(vec.vt, "zeroinitializer") for _ in range(4)]

            def key(j):
                pj = vec.splat(fn.value(f"load {ty}, ptr {fn.at(ty, ws['buf'], j)}"))
                vp = fn.at(ty, a["v"], item["voff"], fn.mul(j, item["ldv"]), hc)
                for c in range(4):
                    x = vec.load(fn.at(ty, vp, c * V), masks[c])
                    fn.emit(f"store {vec.vt} {vec.fma(pj, x, fn.value(f'load {vec.vt}, ptr {accs[c]}'))}, ptr {accs[c]}")
            fn.loop("0", kend, 1, key)
            op = fn.at(ty, a["out"], item["ooff"], fn.mul(r, item["ldo"]), hc)
            for c in range(4):
                y = vec.op("fmul", fn.value(f"load {vec.vt}, ptr {accs[c]}"), rlv)
                vec.store(y, fn.at(ty, op, c * V), masks[c])
        fn.loop("0", a["Hv"], 4 * V, columns)
    fn.loop("0", item["rows"], 1, per_row)


def _reciprocal(fn: _Fn, ty: str, x: str) -> str:
    """1 / x, or 0 where x is 0 (no keys: the output is zeros, as NumPy's empty sum)."""
    inv = fn.value(f"fdiv {ty} 1.0, {x}")
    return fn.value(f"select i1 {fn.value(f'fcmp oeq {ty} {x}, 0.0')}, {ty} 0.0, {ty} {inv}")


def _tiled(fn: _Fn, vec: _Vec, b: Blocking, bk: int, causal: bool, a: dict, item: dict, ws: dict,
           uk_rows: str, uk_cols: str) -> None:
    """The block's queries against blocks of ``bk`` keys with an online softmax (see the
    module's docstring)."""
    ty, V, NR, MR = vec.ty, vec.V, b.nr, b.mr
    rows, q0 = item["rows"], item["q0"]
    ncols = fn.mul(fn.value(f"sdiv i64 {fn.add(rows, NR - 1)}, {NR}"), NR)
    Qt, St, Ot, m, l = ws["Qt"], ws["St"], ws["Ot"], ws["m"], ws["l"]

    def pack(h):                           # Qt[h, i] = q[q0 + i, h] * scale, zeros past rows
        src = fn.at(ty, a["q"], item["qoff"], h)
        dst = fn.at(ty, Qt, fn.mul(h, BQ))

        def given(i):
            x = fn.value(f"load {ty}, ptr {fn.at(ty, src, fn.mul(i, item['ldq']))}")
            y = fn.value(f"fmul {ty} {x}, {a['scale']}")
            fn.emit(f"store {ty} {y}, ptr {fn.at(ty, dst, i)}")
        fn.loop("0", rows, 1, given)
        fn.loop(rows, ncols, 1, lambda i: fn.emit(f"store {ty} 0.0, ptr {fn.at(ty, dst, i)}"))
    fn.loop("0", a["H"], 1, pack)
    ninf = vec.const(float("-inf"))

    def init(i):
        vec.store(ninf, fn.at(ty, m, i))
        vec.store("zeroinitializer", fn.at(ty, l, i))
    fn.loop("0", ncols, V, init)
    fn.loop("0", a["Hv"], 1, lambda h: fn.loop("0", ncols, V, lambda i: vec.store(
        "zeroinitializer", fn.at(ty, Ot, fn.mul(h, BQ), i))))
    kend = _min(fn, item["S"], fn.add(q0, rows)) if causal else item["S"]

    def key_block(k0):
        kn = _min(fn, fn.value(f"sub nsw i64 {kend}, {k0}"), str(bk))

        def scores(r):                     # St[r.., :] = K[k0 + r.., :] @ Qt
            kr = _min(fn, fn.value(f"sub nsw i64 {kn}, {r}"), str(MR))
            ap = fn.at(ty, a["k"], item["koff"], fn.mul(fn.add(k0, r), item["ldk"]))
            fn.loop("0", ncols, NR, lambda c: fn.emit(
                f"call void @{uk_rows}(i64 {a['H']}, ptr {ap}, ptr {fn.at(ty, Qt, c)}, i64 {BQ}, "
                f"ptr {fn.at(ty, St, fn.mul(r, BQ), c)}, i64 {BQ}, i64 {kr}, i64 {NR}, i1 false, i64 {item['ldk']})"))
        fn.loop("0", kn, MR, scores)

        def softmax(cv):                   # one vector of queries down the block's keys
            mold = vec.load(fn.at(ty, m, cv))
            if causal:
                qidx = vec.iota(fn.add(q0, cv))
            mx = fn.slot(vec.vt, "zeroinitializer")
            fn.emit(f"store {vec.vt} {ninf}, ptr {mx}")

            def most(r):
                p = fn.at(ty, St, fn.mul(r, BQ), cv)
                x = vec.load(p)
                if causal:                 # key k0 + r > query: -inf
                    later = fn.value(f"icmp sgt <{V} x i64> {_splat(fn, f'<{V} x i64>', 'i64', fn.add(k0, r), V)}, {qidx}")
                    x = fn.value(f"select <{V} x i1> {later}, {vec.vt} {ninf}, {vec.vt} {x}")
                    vec.store(x, p)
                fn.emit(f"store {vec.vt} {vec.call('maxnum', x, fn.value(f'load {vec.vt}, ptr {mx}'))}, ptr {mx}")
            fn.loop("0", kn, 1, most)
            mnew = vec.call("maxnum", mold, fn.value(f"load {vec.vt}, ptr {mx}"))
            vec.store(mnew, fn.at(ty, m, cv))
            # a column with no key yet (all -inf) subtracts 0: exp gives 0, never NaN
            none = fn.value(f"fcmp oeq {vec.vt} {mnew}, {ninf}")
            msub = fn.value(f"select <{V} x i1> {none}, {vec.vt} zeroinitializer, {vec.vt} {mnew}")
            corr = vec.exp(vec.op("fsub", mold, msub))
            total = fn.slot(vec.vt, "zeroinitializer")

            def weights(r):
                p = fn.at(ty, St, fn.mul(r, BQ), cv)
                e = vec.exp(vec.op("fsub", vec.load(p), msub))
                vec.store(e, p)
                fn.emit(f"store {vec.vt} {vec.op('fadd', e, fn.value(f'load {vec.vt}, ptr {total}'))}, ptr {total}")
            fn.loop("0", kn, 1, weights)
            lp = fn.at(ty, l, cv)
            vec.store(vec.fma(vec.load(lp), corr, fn.value(f"load {vec.vt}, ptr {total}")), lp)

            def rescale(h):
                p = fn.at(ty, Ot, fn.mul(h, BQ), cv)
                vec.store(vec.op("fmul", vec.load(p), corr), p)
            # no column's maximum moved (the usual case after the first blocks): nothing to do
            same = fn.value(f"call i1 @llvm.vector.reduce.and.v{V}i1(<{V} x i1> "
                            f"{fn.value(f'fcmp oeq {vec.vt} {mnew}, {mold}')})")
            fn.if_(fn.value(f"xor i1 {same}, true"), lambda: fn.loop("0", a["Hv"], 1, rescale))
        fn.loop("0", ncols, V, softmax)

        def output(h0):                    # Ot[h0.., :] += V[k0.., h0..]^T @ P
            hr = _min(fn, fn.value(f"sub nsw i64 {a['Hv']}, {h0}"), str(MR))
            ap = fn.at(ty, a["v"], item["voff"], fn.mul(k0, item["ldv"]), h0)
            fn.loop("0", ncols, NR, lambda c: fn.emit(
                f"call void @{uk_cols}(i64 {kn}, ptr {ap}, ptr {fn.at(ty, St, c)}, i64 {BQ}, "
                f"ptr {fn.at(ty, Ot, fn.mul(h0, BQ), c)}, i64 {BQ}, i64 {hr}, i64 {NR}, i1 true, i64 {item['ldv']})"))
        fn.loop("0", a["Hv"], MR, output)
    fn.loop("0", kend, bk, key_block)

    def finish(i):                         # out[q0 + i, :] = Ot[:, i] / l[i]
        rl = _reciprocal(fn, ty, fn.value(f"load {ty}, ptr {fn.at(ty, l, i)}"))
        op = fn.at(ty, a["out"], item["ooff"], fn.mul(i, item["ldo"]))
        fn.loop("0", a["Hv"], 1, lambda h: fn.emit(
            f"store {ty} {fn.value(f'fmul {ty} {rl}, ' + fn.value(f'load {ty}, ptr ' + fn.at(ty, Ot, fn.mul(h, BQ), i)))}, "
            f"ptr {fn.at(ty, op, h)}"))
    fn.loop("0", rows, 1, finish)


def attention_text(dtype_char: str, causal: bool, vector_bits: int, lengths: int = 0) -> str:
    """The LLVM module of native ``symbol(dtype_char, causal, lengths)`` (library ABI: q, k,
    v, a 0-d scale, [lengths,] out; ranks 4, 4, 4, 0, [1,] 4) for ``vector_bits``-wide
    registers."""
    b = blocking(dtype_char, max(vector_bits, 128))
    if vector_bits >= 512:                 # 8 x 3 vectors: head sizes 64, 128 are whole tiles
        b = Blocking(b.ty, b.size, b.lanes, 8, 3, b.kc, b.mc, b.nc)
    name = symbol(dtype_char, causal, lengths)
    arrays = {0: ARRAYS, 1: dict(ARRAYS, lengths=4, out=5),
              2: dict(ARRAYS, lengths=4, qlengths=5, out=6)}[lengths]
    ty, V, size = b.ty, b.lanes, b.size
    bk = BK[dtype_char]
    uk_rows, uk_cols = f"{name}.ukernel_rows", f"{name}.ukernel_columns"
    parts = [_micro_kernel(b, uk_rows, "rows", add=False), _micro_kernel(b, uk_cols, "columns", add=True)]

    fn = _Fn(f"define internal void @{name}.work(ptr %ctx) #0")
    vec = _Vec(fn, b)
    a = {}
    args = ARGS + ("lengths", "qlengths")[:lengths]
    for k, arg in enumerate(args):
        slot = fn.at("i64", "%ctx", k)
        a[arg] = fn.value(f"load {'ptr' if arg in arrays else 'i64'}, ptr {slot}")
    a["scale"] = fn.value(f"load {ty}, ptr {a['scale']}")
    nxt = fn.at("i64", "%ctx", ARGS.index("next"))
    words = fn.add(fn.mul(BQ, fn.add(a["H"], bk, a["Hv"], 2)), a["S"], V)
    nbytes = fn.mul(fn.value(f"sdiv i64 {fn.add(fn.mul(words, size), 63)}, 64"), 64)
    base = fn.value(f"call ptr @aligned_alloc(i64 64, i64 {nbytes})")
    ws = {"Qt": base}
    ws["St"] = fn.at(ty, ws["Qt"], fn.mul(a["H"], BQ))
    ws["Ot"] = fn.at(ty, ws["St"], bk * BQ)
    ws["m"] = fn.at(ty, ws["Ot"], fn.mul(a["Hv"], BQ))
    ws["l"] = fn.at(ty, ws["m"], BQ)
    ws["buf"] = fn.at(ty, ws["l"], BQ)
    fn.emit("br label %claim")
    fn.start_block("claim")
    it = fn.value(f"atomicrmw add ptr {nxt}, i64 1 monotonic")
    more = fn.value(f"icmp slt i64 {it}, {a['items']}")
    fn.emit(f"br i1 {more}, label %item, label %done")
    fn.start_block("item")
    nqb = a["nqb"]
    bn = fn.value(f"sdiv i64 {it}, {nqb}")
    qb = fn.value(f"sub nsw i64 {fn.value(f'sub nsw i64 {nqb}, 1')}, {fn.value(f'srem i64 {it}, {nqb}')}")
    bi, n = fn.value(f"sdiv i64 {bn}, {a['N']}"), fn.value(f"srem i64 {bn}, {a['N']}")
    group = fn.value(f"sdiv i64 {a['N']}, {a['K']}")
    kvh = fn.value(f"sdiv i64 {n}, {group}")
    q0 = fn.mul(qb, BQ)
    item = {"q0": q0, "rows": _min(fn, str(BQ), fn.value(f"sub nsw i64 {a['T']}, {q0}")), "S": a["S"]}
    if lengths:                            # this batch's keys: lengths[bi], within [0, S]
        at = fn.at("i32", a["lengths"], bi)
        n_b = fn.value(f"sext i32 {fn.value(f'load i32, ptr {at}')} to i64")
        item["S"] = _min(fn, fn.value(f"call i64 @llvm.smax.i64(i64 {n_b}, i64 0)"), a["S"])
    zero_rows = None
    if lengths == 2:                       # queries from qlengths[bi] on: zeros, not computed
        at = fn.at("i32", a["qlengths"], bi)
        t_b = fn.value(f"sext i32 {fn.value(f'load i32, ptr {at}')} to i64")
        real = _min(fn, fn.value(f"call i64 @llvm.smax.i64(i64 {fn.value(f'sub nsw i64 {t_b}, {q0}')}, i64 0)"),
                    item["rows"])
        zero_rows = (real, item["rows"])
        item["rows"] = real
    qrow = fn.add(fn.mul(fn.add(fn.mul(bi, a["T"]), q0), a["N"]), n)
    kvrow = fn.add(fn.mul(bi, a["S"], a["K"]), kvh)
    item.update(qoff=fn.mul(qrow, a["H"]), ldq=fn.mul(a["N"], a["H"]),
                koff=fn.mul(kvrow, a["H"]), ldk=fn.mul(a["K"], a["H"]),
                voff=fn.mul(kvrow, a["Hv"]), ldv=fn.mul(a["K"], a["Hv"]),
                ooff=fn.mul(qrow, a["Hv"]), ldo=fn.mul(a["N"], a["Hv"]))
    if zero_rows is not None:              # this head's rows past the queries: zeros
        def zero(r):
            op = fn.at(ty, a["out"], item["ooff"], fn.mul(r, item["ldo"]))
            fn.loop("0", a["Hv"], 1, lambda h: fn.emit(f"store {ty} 0.0, ptr {fn.at(ty, op, h)}"))
        fn.loop(zero_rows[0], zero_rows[1], 1, zero)
        skip = fn.value(f"icmp sle i64 {item['rows']}, 0")
        fn.emit(f"br i1 {skip}, label %claim, label %compute")
        fn.start_block("compute")
    few = fn.value(f"icmp sle i64 {item['rows']}, {ROW_MAX}")
    no_h = fn.value(f"icmp eq i64 {a['H']}, 0")
    few = fn.value(f"or i1 {few}, {no_h}")
    fn.emit(f"br i1 {few}, label %rows, label %tiles")
    fn.start_block("rows")
    _row_by_row(fn, vec, causal, a, item, ws)
    fn.emit("br label %claim")
    fn.start_block("tiles")
    _tiled(fn, vec, b, bk, causal, a, item, ws, uk_rows, uk_cols)
    fn.emit("br label %claim")
    fn.start_block("done")
    fn.emit(f"call void @free(ptr {base})")
    fn.emit("ret void")
    parts.append(fn.text())

    # the entry: library ABI; the team when the work is worth a fork
    fn = _Fn(f"define i32 @{name}(ptr %data, ptr %shapes, ptr %ndims, i64 %nargs)")
    dims = {d: fn.value(f"load i64, ptr {fn.at('i64', '%shapes', k)}") for d, k in DIMS.items()}
    ptrs = {p: fn.value(f"load ptr, ptr {fn.at('ptr', '%data', k)}") for p, k in arrays.items()}
    nqb = fn.value(f"sdiv i64 {fn.add(dims['T'], BQ - 1)}, {BQ}")
    items = fn.mul(dims["B"], dims["N"], nqb)
    ctx = fn.value(f"alloca [{len(args)} x i64], align 8")
    vals = {**dims, **ptrs, "items": items, "nqb": nqb, "next": "0"}
    for k, arg in enumerate(args):
        t = "ptr" if arg in arrays else "i64"
        fn.emit(f"store {t} {vals[arg]}, ptr {fn.at('i64', ctx, k)}")
    macs = fn.mul(dims["B"], dims["N"], dims["T"], dims["S"], fn.add(dims["H"], dims["Hv"]))
    big = fn.value(f"and i1 {fn.value(f'icmp sge i64 {macs}, {PARALLEL_MIN_MACS}')}, "
                   f"{fn.value(f'icmp sgt i64 {items}, 1')}")
    par, threads = team_wanted(fn, big, fn.value("call i64 @llvm.readcyclecounter()"))
    fn.emit(f"br i1 {par}, label %team, label %alone")
    fn.start_block("team")
    fn.emit(f"call void @GOMP_parallel(ptr @{name}.work, ptr {ctx}, i32 {threads}, i32 0)")
    fn.emit("br label %out")
    fn.start_block("alone")
    fn.emit(f"call void @{name}.work(ptr {ctx})")
    fn.emit("br label %out")
    fn.start_block("out")
    fn.emit("ret i32 0")
    parts.append(fn.text())

    sfx = f"v{V}f{size * 8}"
    vt = f"<{V} x {ty}>"
    decls = set(GEMM_DECLARATIONS) | {
        f"declare {vt} @llvm.maxnum.{sfx}({vt}, {vt})",
        f"declare {vt} @llvm.rint.{sfx}({vt})",
        f"declare {ty} @llvm.vector.reduce.fadd.{sfx}({ty}, {vt})",
        f"declare {ty} @llvm.maxnum.f{size * 8}({ty}, {ty})",
        f"declare i1 @llvm.vector.reduce.and.v{V}i1(<{V} x i1>)",
        *([f"declare {vt} @llvm.x86.avx512.mask.scalef.{'ps' if size == 4 else 'pd'}.512({vt}, {vt}, {vt}, i{V}, i32)"]
          if V * size == 64 else []),
        # gemm's declarations have these for 4, 8 and 16 lanes; SSE's float64 has 2
        f"declare {vt} @llvm.fma.{sfx}({vt}, {vt}, {vt})",
        f"declare {vt} @llvm.masked.load.{sfx}.p0(ptr, i32, <{V} x i1>, {vt})",
        f"declare void @llvm.masked.store.{sfx}.p0({vt}, ptr, i32, <{V} x i1>)"}
    return "\n".join(["; relaxjax attention " + name, "@rj_num_threads = external global i32",
                      "@rj_serial_until = external global i64", *sorted(decls), *parts,
                      "attributes #0 = { nounwind }\nattributes #1 = { nounwind noinline }", ""])


@functools.lru_cache(maxsize=None)
def _compiled(dtype_char: str, causal: bool, lengths: int):
    """The module of one attention function, built once per machine (a shared library in
    the persistent cache) or in memory where no linker is found; kept for the process."""
    prepare_process()
    text = attention_text(dtype_char, causal, target.vector_bits(), lengths)
    return compile_llvm(text, [], native=generated_products())


def address(dtype_char: str, causal: bool, lengths: int = 0) -> int:
    """The address of native ``symbol(dtype_char, causal, lengths)`` (compiled on first use)."""
    return _compiled(dtype_char, causal, lengths).address(symbol(dtype_char, causal, lengths))


def _loader(dtype_char: str, causal: bool, lengths: int = 0):
    return loader(lambda: address(dtype_char, causal, lengths))


float32, float64, float32_causal, float64_causal = (
    _loader(d, c) for c in (False, True) for d in "sd")
float32_lengths, float64_lengths = (_loader(d, False, 1) for d in "sd")
float32_qlengths, float64_qlengths = (_loader(d, False, 2) for d in "sd")
