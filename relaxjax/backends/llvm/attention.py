"""Attention that never builds the score matrix: the native ``nn.attention_*`` library
functions of :mod:`relaxjax.library`, generated as LLVM IR.

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

The ``varlen`` variant (``library.attention_varlen_name``) takes the sequences packed,
``q`` (T, N, H), ``k`` (T, K, H), ``v`` (T, K, Hv), and ``offsets`` (B + 1,) int64 before
``out`` (T, N, Hv): the entry checks the offsets (a nonzero status otherwise) and counts each
sequence's query blocks into a prefix array; an item is (query block over all sequences,
head), its sequence found by bisecting that array, and the same two schedules run on the
sequence's rows.  The ``cross`` variant's keys and values are sequences of their own,
``k`` (Tk, K, H), ``v`` (Tk, K, Hv), with ``key_offsets`` (B + 1,) after ``offsets``: an item
reads its sequence's keys from there (cross attention between two packed batches).  What
differs between the variants is a ``_Layout``: the call's arrays and
dims, the context's slots, the entry's setup and a worker's decoding of an item.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from ...library import loader
from . import target
from .attention_vec import Fn, Vec, fp_const, reciprocal
from .engine import ATTENTION_PIPELINE, compile_llvm, generated_products, prepare_process
from .gemm import DECLARATIONS as GEMM_DECLARATIONS, Blocking, _micro_kernel, _min, _splat, blocking, team_wanted

ROW_MAX = 8          # a block of this many queries or fewer runs row by row
BQ = 48              # queries per block (a multiple of every micro-tile width NR; two
                     # threads share a sequence of 1024 more evenly in blocks of 48 than of 96)
BK = {"s": 128, "d": 64}          # keys per block: the scores, BK x BQ, stay in L1/L2
PREFETCH_KEYS = 8
PARALLEL_MIN_MACS = 1 << 17       # less work than this runs on the calling thread: about
# 512 KB of keys and values (float32), which one thread streams in ~50 us against a fork's few;
# at 1 << 20 a decode step's one query over a cache of 1024 (786k) ran alone, reading 3 MB per
# layer at one thread's speed (6 layers at t = 1000: 2.7 -> 2.0 ms per step)


def symbol(dtype_char: str, causal: bool, lengths: int = 0, varlen: bool = False, cross: bool = False) -> str:
    """``lengths``: 0, 1 (key lengths) or 2 (key and query lengths); ``varlen``: the packed
    sequences' variant (``cross``: keys and values packed by offsets of their own)."""
    return (f"rj_attention{'_varlen' if varlen else ''}{'_cross' if cross else ''}_{dtype_char}"
            f"{'_causal' if causal else ''}{['', '_lengths', '_qlengths'][lengths]}")


def _row_by_row(fn: Fn, vec: Vec, causal: bool, a: dict, item: dict, ws: dict) -> None:
    """The block's queries one at a time: scores in ``buf``, their softmax, then the output
    a register block of four vectors of columns at a time."""
    ty, V = vec.ty, vec.V
    ninf = fp_const(float("-inf"), ty == "float")

    def per_row(r):
        qi = fn.add(item["q0"], r)
        kend = _min(fn, item["S"], fn.add(qi, 1)) if causal else item["S"]
        qp = fn.at(ty, a["q"], item["qoff"], fn.mul(r, item["ldq"]))
        mx = fn.slot(ty, ninf)

        def ahead(base, off, j, ld):
            # the row PREFETCH_KEYS on, its first 256 bytes (a head of 64 float32; the rows
            # of one head are a row stride apart, and the hardware's stride prefetch does not
            # run far enough ahead of such short reads: RESULTS.md, session 15)
            row = fn.value(f"getelementptr {ty}, ptr {base}, i64 {fn.add(off, fn.mul(fn.add(j, PREFETCH_KEYS), ld))}")
            for line in range(0, 256, 64):
                p = fn.value(f"getelementptr i8, ptr {row}, i64 {line}")
                fn.emit(f"call void @llvm.prefetch.p0(ptr {p}, i32 0, i32 3, i32 1)")

        def score(j):
            ahead(a["k"], item["koff"], j, item["ldk"])
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
        rl = reciprocal(fn, ty, vec.sum(fn.value(f"load {vec.vt}, ptr {total}")))
        rlv = vec.splat(rl)

        def columns(hc):
            masks = [vec.lanes_below(fn.value(f"sub nsw i64 {a['Hv']}, {fn.add(hc, c * V)}")) for c in range(4)]
            accs = [fn.slot(vec.vt, "zeroinitializer") for _ in range(4)]

            def key(j):
                ahead(a["v"], item["voff"], j, item["ldv"])
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


def _tiled(fn: Fn, vec: Vec, b: Blocking, bk: int, causal: bool, a: dict, item: dict, ws: dict,
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
        rl = reciprocal(fn, ty, fn.value(f"load {ty}, ptr {fn.at(ty, l, i)}"))
        op = fn.at(ty, a["out"], item["ooff"], fn.mul(i, item["ldo"]))
        fn.loop("0", a["Hv"], 1, lambda h: fn.emit(
            f"store {ty} {fn.value(f'fmul {ty} {rl}, ' + fn.value(f'load {ty}, ptr ' + fn.at(ty, Ot, fn.mul(h, BQ), i)))}, "
            f"ptr {fn.at(ty, op, h)}"))
    fn.loop("0", rows, 1, finish)


def _dense_setup(fn: Fn, d: dict, p: dict) -> tuple[dict, str, list]:
    """The batched variants' work: ``B * N`` heads of ``ceil(T / BQ)`` query blocks each."""
    nqb = fn.value(f"sdiv i64 {fn.add(d['T'], BQ - 1)}, {BQ}")
    macs = fn.mul(d["B"], d["N"], d["T"], d["S"], fn.add(d["H"], d["Hv"]))
    return {"items": fn.mul(d["B"], d["N"], nqb), "nqb": nqb}, macs, []


def _dense_decode(lengths: int):
    def decode(fn: Fn, a: dict, it: str, ty: str) -> dict:
        """Item ``it``: query block ``qb`` (the last first: a causal product's heaviest) of
        head ``n`` of batch ``bi``; rows past a batch's query length zeroed here."""
        nqb = a["nqb"]
        bn = fn.value(f"sdiv i64 {it}, {nqb}")
        qb = fn.value(f"sub nsw i64 {fn.value(f'sub nsw i64 {nqb}, 1')}, {fn.value(f'srem i64 {it}, {nqb}')}")
        bi, n = fn.value(f"sdiv i64 {bn}, {a['N']}"), fn.value(f"srem i64 {bn}, {a['N']}")
        q0 = fn.mul(qb, BQ)
        item = {"q0": q0, "rows": _min(fn, str(BQ), fn.value(f"sub nsw i64 {a['T']}, {q0}")), "S": a["S"]}
        if lengths:                        # this batch's keys: lengths[bi], within [0, S]
            at = fn.at("i32", a["lengths"], bi)
            n_b = fn.value(f"sext i32 {fn.value(f'load i32, ptr {at}')} to i64")
            item["S"] = _min(fn, fn.value(f"call i64 @llvm.smax.i64(i64 {n_b}, i64 0)"), a["S"])
        zero_rows = None
        if lengths == 2:                   # queries from qlengths[bi] on: zeros, not computed
            at = fn.at("i32", a["qlengths"], bi)
            t_b = fn.value(f"sext i32 {fn.value(f'load i32, ptr {at}')} to i64")
            real = _min(fn, fn.value(f"call i64 @llvm.smax.i64(i64 {fn.value(f'sub nsw i64 {t_b}, {q0}')}, i64 0)"),
                        item["rows"])
            zero_rows = (real, item["rows"])
            item["rows"] = real
        _rows_of(fn, a, item, n, fn.add(fn.mul(bi, a["T"]), q0), fn.mul(bi, a["S"]))
        if zero_rows is not None:          # this head's rows past the queries: zeros
            def zero(r):
                op = fn.at(ty, a["out"], item["ooff"], fn.mul(r, item["ldo"]))
                fn.loop("0", a["Hv"], 1, lambda h: fn.emit(f"store {ty} 0.0, ptr {fn.at(ty, op, h)}"))
            fn.loop(zero_rows[0], zero_rows[1], 1, zero)
            skip = fn.value(f"icmp sle i64 {item['rows']}, 0")
            fn.emit(f"br i1 {skip}, label %claim, label %compute")
            fn.start_block("compute")
        return item
    return decode


def _rows_of(fn: Fn, a: dict, item: dict, n: str, qrow0: str, krow0: str) -> None:
    """Where the item's rows are: its first query is packed row ``qrow0`` (head ``n``), its
    keys and values start at packed row ``krow0`` (the head ``n`` reads); the leading
    dimension of each array (rows of all heads, interleaved)."""
    group = fn.value(f"sdiv i64 {a['N']}, {a['K']}")
    kvh = fn.value(f"sdiv i64 {n}, {group}")
    qrow = fn.add(fn.mul(qrow0, a["N"]), n)
    kvrow = fn.add(fn.mul(krow0, a["K"]), kvh)
    item.update(qoff=fn.mul(qrow, a["H"]), ldq=fn.mul(a["N"], a["H"]),
                koff=fn.mul(kvrow, a["H"]), ldk=fn.mul(a["K"], a["H"]),
                voff=fn.mul(kvrow, a["Hv"]), ldv=fn.mul(a["K"], a["Hv"]),
                ooff=fn.mul(qrow, a["Hv"]), ldo=fn.mul(a["N"], a["Hv"]))


def _varlen_setup(fn: Fn, d: dict, p: dict, cross: bool) -> tuple[dict, str, list]:
    """The packed variant's work, from the offsets: their check (status 2, 3 for ``cross``:
    shapes that do not fit; 1: offsets not running from 0 to the packed rows without
    decreasing), each sequence's query blocks counted into ``blocks`` (``blocks[b]``: the
    first block of sequence ``b``; B + 1 entries), the longest key sequence (the row
    schedule's score buffer) and the multiply-adds, sum of queries x keys, that decide the
    fork.  ``cross``: the keys' own offsets (``key_offsets``), of the same batch."""
    T, N, K = d["T"], d["N"], d["K"]
    kz = fn.value(f"icmp eq i64 {K}, 0")
    rem = fn.value(f"srem i64 {N}, {fn.value(f'select i1 {kz}, i64 1, i64 {K}')}")
    heads_bad = fn.value(f"select i1 {kz}, i1 {fn.value(f'icmp ne i64 {N}, 0')}, i1 "
                         f"{fn.value(f'icmp ne i64 {rem}, 0')}")
    bad = heads_bad
    Tk = d["Tk"] if cross else T                           # the keys' packed rows
    fits = [(d["Tk"], Tk), (d["Tv"], Tk), (d["Hk"], d["H"]), (d["Kv"], K)]
    if cross:
        fits.append((d["B1k"], d["B1"]))
    for x, y in fits:
        bad = fn.value(f"or i1 {bad}, {fn.value(f'icmp ne i64 {x}, {y}')}")
    few = fn.value(f"icmp slt i64 {d['B1']}, 1")           # no offsets[0]
    bad = fn.value(f"or i1 {bad}, {few}")
    _return_if(fn, bad, 3 if cross else 2)
    B = fn.value(f"sub nsw i64 {d['B1']}, 1")
    nbytes = fn.mul(fn.value(f"sdiv i64 {fn.add(fn.mul(d['B1'], 8), 63)}, 64"), 64)
    blocks = fn.value(f"call ptr @aligned_alloc(i64 64, i64 {nbytes})")
    fn.emit(f"store i64 0, ptr {blocks}")
    off, koff = p["offsets"], p["key_offsets"] if cross else p["offsets"]
    firsts = [fn.value(f"icmp ne i64 {fn.value(f'load i64, ptr {o}')}, 0") for o in [off] + ([koff] if cross else [])]
    bad = fn.slot("i1", firsts[0] if len(firsts) == 1 else fn.value(f"or i1 {firsts[0]}, {firsts[1]}"))
    longest, pairs, nblk = fn.slot("i64", "0"), fn.slot("i64", "0"), fn.slot("i64", "0")

    def update(slot: str, ty: str, op: str, x: str) -> str:
        new = fn.value(op.format(fn.value(f"load {ty}, ptr {slot}"), x))
        fn.emit(f"store {ty} {new}, ptr {slot}")
        return new

    def length(offsets: str, b: str) -> str:
        s = fn.value(f"load i64, ptr {fn.at('i64', offsets, b)}")
        e = fn.value(f"load i64, ptr {fn.at('i64', offsets, fn.add(b, 1))}")
        n = fn.value(f"sub i64 {e}, {s}")          # (no nsw: bad offsets may overflow)
        update(bad, "i1", "or i1 {}, {}", fn.value(f"icmp slt i64 {n}, 0"))
        return n

    def sequence(b):
        n = length(off, b)
        nk = length(koff, b) if cross else n
        update(longest, "i64", "call i64 @llvm.smax.i64(i64 {}, i64 {})", nk)
        update(pairs, "i64", "add i64 {}, {}", fn.value(f"mul i64 {n}, {nk}"))
        nb = update(nblk, "i64", "add i64 {}, {}", fn.value(f"sdiv i64 {fn.value(f'add i64 {n}, {BQ - 1}')}, {BQ}"))
        fn.emit(f"store i64 {nb}, ptr {fn.at('i64', blocks, fn.add(b, 1))}")
    fn.loop("0", B, 1, sequence)
    bad = fn.value(f"load i1, ptr {bad}")
    for o, rows in ((off, T),) + (((koff, Tk),) if cross else ()):
        last = fn.value(f"load i64, ptr {fn.at('i64', o, B)}")
        bad = fn.value(f"or i1 {bad}, {fn.value(f'icmp ne i64 {last}, {rows}')}")
    _return_if(fn, bad, 1, f"call void @free(ptr {blocks})")
    items = fn.value(f"mul i64 {fn.value(f'load i64, ptr {nblk}')}, {N}")
    macs = fn.value(f"mul i64 {fn.value(f'load i64, ptr {pairs}')}, {fn.mul(N, fn.add(d['H'], d['Hv']))}")
    vals = {"S": fn.value(f"load i64, ptr {longest}"), "items": items, "B": B, "blocks": blocks}
    return vals, macs, [f"call void @free(ptr {blocks})"]


def _return_if(fn: Fn, cond: str, status: int, *before: str) -> None:
    """Return ``status`` (after the lines ``before``) where ``cond`` holds; go on otherwise."""
    stop, go = fn.label("fail"), fn.label("valid")
    fn.emit(f"br i1 {cond}, label %{stop}, label %{go}")
    fn.start_block(stop)
    for line in before:
        fn.emit(line)
    fn.emit(f"ret i32 {status}")
    fn.start_block(go)


def _varlen_decode(fn: Fn, a: dict, it: str, ty: str, cross: bool) -> dict:
    """Item ``it``: head ``it % N`` of query block ``it / N`` counted over all sequences;
    its sequence found by bisecting ``blocks``, its rows at the sequence's offset (its last
    block first: a causal product's heaviest); its keys at the sequence's key offset
    (``cross``) or the same."""
    n, gb = fn.value(f"srem i64 {it}, {a['N']}"), fn.value(f"sdiv i64 {it}, {a['N']}")
    lo, hi = fn.slot("i64", "0"), fn.slot("i64", a["B"])      # blocks[lo] <= gb < blocks[hi]
    head, body, found = fn.label("bisect"), fn.label("halve"), fn.label("found")
    fn.emit(f"br label %{head}")
    fn.start_block(head)
    low, high = fn.value(f"load i64, ptr {lo}"), fn.value(f"load i64, ptr {hi}")
    wide = fn.value(f"icmp sgt i64 {fn.value(f'sub nsw i64 {high}, {low}')}, 1")
    fn.emit(f"br i1 {wide}, label %{body}, label %{found}")
    fn.start_block(body)
    mid = fn.value(f"ashr i64 {fn.add(low, high)}, 1")
    at_mid = fn.value(f"load i64, ptr {fn.at('i64', a['blocks'], mid)}")
    le = fn.value(f"icmp sle i64 {at_mid}, {gb}")
    fn.emit(f"store i64 {fn.value(f'select i1 {le}, i64 {mid}, i64 {low}')}, ptr {lo}")
    fn.emit(f"store i64 {fn.value(f'select i1 {le}, i64 {high}, i64 {mid}')}, ptr {hi}")
    fn.emit(f"br label %{head}")
    fn.start_block(found)
    b = fn.value(f"load i64, ptr {lo}")

    def at(array: str, i: str) -> str:
        return fn.value(f"load i64, ptr {fn.at('i64', a[array], i)}")
    # the sequence's blocks are [blocks[b], blocks[b + 1]); counted from its last
    last = fn.value(f"sub nsw i64 {at('blocks', fn.add(b, 1))}, 1")
    qb = fn.value(f"sub nsw i64 {last}, {gb}")
    base = at("offsets", b)
    length = fn.value(f"sub nsw i64 {at('offsets', fn.add(b, 1))}, {base}")
    q0 = fn.mul(qb, BQ)
    item = {"q0": q0, "rows": _min(fn, str(BQ), fn.value(f"sub nsw i64 {length}, {q0}")), "S": length}
    kbase = base
    if cross:
        kbase = at("key_offsets", b)
        item["S"] = fn.value(f"sub nsw i64 {at('key_offsets', fn.add(b, 1))}, {kbase}")
    _rows_of(fn, a, item, n, fn.add(base, q0), kbase)
    return item


@dataclass(frozen=True)
class _Layout:
    """What differs between the library functions: the call's arrays (their index in the
    call), the dims read from its shapes (index in the concatenated shapes), the context's
    slots besides ``COMMON`` (those holding pointers in ``pointers``), and two generators:
    ``setup`` in the entry (the context's values, the multiply-adds, the cleanup; it may
    return a nonzero status early) and ``decode`` in a worker (a claimed item's rows)."""
    arrays: dict
    dims: dict
    extra: tuple
    setup: Callable
    decode: Callable
    pointers: frozenset = frozenset()


# the context the workers share: the arguments and the work item counter, then a layout's own
COMMON = ("T", "N", "H", "S", "K", "Hv", "q", "k", "v", "out", "scale", "items", "next")
ARRAYS = {"q": 0, "k": 1, "v": 2, "scale": 3, "out": 4}
DIMS = {"B": 0, "T": 1, "N": 2, "H": 3, "S": 5, "K": 6, "Hv": 11}


def _layout(lengths: int, varlen: bool, cross: bool = False) -> _Layout:
    dims = {"T": 0, "N": 1, "H": 2, "Tk": 3, "K": 4, "Hk": 5, "Tv": 6, "Kv": 7, "Hv": 8, "B1": 9}
    if cross:        # q (T, N, H), k (Tk, K, H), v (Tk, K, Hv), scale, offsets, key_offsets (B + 1,), out
        return _Layout({**ARRAYS, "offsets": 4, "key_offsets": 5, "out": 6}, {**dims, "B1k": 10},
                       ("B", "offsets", "key_offsets", "blocks"), functools.partial(_varlen_setup, cross=True),
                       functools.partial(_varlen_decode, cross=True), frozenset({"blocks"}))
    if varlen:       # q (T, N, H), k (T, K, H), v (T, K, Hv), scale, offsets (B + 1,), out
        return _Layout({**ARRAYS, "offsets": 4, "out": 5}, dims, ("B", "offsets", "blocks"),
                       functools.partial(_varlen_setup, cross=False),
                       functools.partial(_varlen_decode, cross=False), frozenset({"blocks"}))
    arrays = {0: ARRAYS, 1: dict(ARRAYS, lengths=4, out=5), 2: dict(ARRAYS, lengths=4, qlengths=5, out=6)}[lengths]
    return _Layout(arrays, DIMS, ("B", "nqb") + ("lengths", "qlengths")[:lengths], _dense_setup,
                   _dense_decode(lengths))


def attention_text(dtype_char: str, causal: bool, vector_bits: int, lengths: int = 0, varlen: bool = False,
                   cross: bool = False) -> str:
    """The LLVM module of native ``symbol(dtype_char, causal, lengths, varlen, cross)``
    (library ABI: q, k, v, a 0-d scale, [lengths,] out, ranks 4, 4, 4, 0, [1,] 4; varlen: q,
    k, v, scale, offsets, [key_offsets,] out, ranks 3, 3, 3, 0, 1, [1,] 3) for
    ``vector_bits``-wide registers."""
    b = blocking(dtype_char, max(vector_bits, 128))
    if vector_bits >= 512:                 # 8 x 3 vectors: head sizes 64, 128 are whole tiles
        b = Blocking(b.ty, b.size, b.lanes, 8, 3, b.kc, b.mc, b.nc)
    name = symbol(dtype_char, causal, lengths, varlen, cross)
    lay = _layout(lengths, varlen, cross)
    ty, V, size = b.ty, b.lanes, b.size
    bk = BK[dtype_char]
    uk_rows, uk_cols = f"{name}.ukernel_rows", f"{name}.ukernel_columns"
    parts = [_micro_kernel(b, uk_rows, "rows", add=False), _micro_kernel(b, uk_cols, "columns", add=True)]
    args = COMMON + lay.extra

    def pointer(arg: str) -> bool:
        return arg in lay.arrays or arg in lay.pointers

    fn = Fn(f"define internal void @{name}.work(ptr %ctx) #0")
    vec = Vec(fn, b)
    a = {arg: fn.value(f"load {'ptr' if pointer(arg) else 'i64'}, ptr {fn.at('i64', '%ctx', k)}")
         for k, arg in enumerate(args)}
    a["scale"] = fn.value(f"load {ty}, ptr {a['scale']}")
    nxt = fn.at("i64", "%ctx", args.index("next"))
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
    item = lay.decode(fn, a, it, ty)
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
    fn = Fn(f"define i32 @{name}(ptr %data, ptr %shapes, ptr %ndims, i64 %nargs)")
    dims = {d: fn.value(f"load i64, ptr {fn.at('i64', '%shapes', k)}") for d, k in lay.dims.items()}
    ptrs = {p: fn.value(f"load ptr, ptr {fn.at('ptr', '%data', k)}") for p, k in lay.arrays.items()}
    own, macs, cleanup = lay.setup(fn, dims, ptrs)
    ctx = fn.local(f"[{len(args)} x i64]")
    vals = {**dims, **ptrs, **own, "next": "0"}
    for k, arg in enumerate(args):
        fn.emit(f"store {'ptr' if pointer(arg) else 'i64'} {vals[arg]}, ptr {fn.at('i64', ctx, k)}")
    items = own["items"]
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
    for line in cleanup:
        fn.emit(line)
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
def _compiled(dtype_char: str, causal: bool, lengths: int, varlen: bool, cross: bool):
    """The module of one attention function, built once per machine (a shared library in
    the persistent cache) or in memory where no linker is found; kept for the process."""
    prepare_process()
    text = attention_text(dtype_char, causal, target.vector_bits(), lengths, varlen, cross)
    return compile_llvm(text, [], native=generated_products(), pipeline=ATTENTION_PIPELINE)


def address(dtype_char: str, causal: bool, lengths: int = 0, varlen: bool = False, cross: bool = False) -> int:
    """The address of native ``symbol(dtype_char, causal, lengths, varlen, cross)``
    (compiled on first use)."""
    return _compiled(dtype_char, causal, lengths, varlen, cross).address(
        symbol(dtype_char, causal, lengths, varlen, cross))


def _loader(dtype_char: str, causal: bool, lengths: int = 0, varlen: bool = False, cross: bool = False):
    return loader(lambda: address(dtype_char, causal, lengths, varlen, cross))


float32, float64, float32_causal, float64_causal = (
    _loader(d, c) for c in (False, True) for d in "sd")
float32_lengths, float64_lengths = (_loader(d, False, 1) for d in "sd")
float32_qlengths, float64_qlengths = (_loader(d, False, 2) for d in "sd")
float32_varlen, float64_varlen, float32_varlen_causal, float64_varlen_causal = (
    _loader(d, c, varlen=True) for c in (False, True) for d in "sd")
float32_varlen_cross, float64_varlen_cross, float32_varlen_cross_causal, float64_varlen_cross_causal = (
    _loader(d, c, varlen=True, cross=True) for c in (False, True) for d in "sd")
