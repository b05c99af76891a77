"""The loop-level meaning of graph primitives, shared by Legalize (one program per binding)
and FuseTIR (one program per fused group).

Each primitive's loop-level meaning is a *compute rule*: given the output element's index
(loop variables) and a reader per operand, return the scalar expression for that element.
Elementwise primitives share one rule (an ``Op`` named like the primitive, so a backend adds
one scalar lowering per primitive); layout primitives map indices; reductions fold elements
into an ``Accumulator``.  Compute rules compose by substituting a producer's expression for
a reader, which is how fusion inlines producers into consumers.

Left at the graph level, as host operations (``HOST_OPS``): ``reshape`` (a zero-copy view of
a row-major buffer), ``match_cast`` (a run-time shape check), and the data-dependent
``nonzero``, ``boolean_mask`` and ``iota_count``, whose output size is only known after reading
the data.
"""
from __future__ import annotations

import itertools
from typing import Callable, Iterator

import numpy as np
import sympy

from .. import dtypes as dt
from .. import tir
from ..ir import Literal
from ..shapes import is_symbolic, same_dim
from ..tir import INDEX, BOOL, Assign, Const, Expr, For, Local, Seq, Store, from_sympy, op
from ..op_table import registrar

HOST_OPS = {"reshape", "match_cast", "nonzero", "boolean_mask", "iota_count", "check_int_power", "check_equal",
            # structured control flow: the runtimes drive the iterations and run the regions
            "fori_loop", "while_loop", "scan", "cond"}
# float matmul is a library call (the LLVM backend calls CBLAS, CUDA cuBLAS)
BLAS = {np.dtype("float32"): "blas.sgemm", np.dtype("float64"): "blas.dgemm"}

Reader = Callable[[list], Expr]
ARG_REDUCTIONS = ("argmax", "argmin")
# primitives that are library calls: primitive -> registered library function
LIBRARY_CALLS = {"sort": "sort", "argsort": "argsort"}
# running reductions along an axis -> the reduction whose accumulator they keep
SCANS = {"cumsum": "reduce_sum", "cumprod": "reduce_prod", "cummax": "reduce_max",
         "cummin": "reduce_min"}


# Reductions without an identity, by the name NumPy's error gives them
NO_IDENTITY = {"reduce_max": "maximum", "reduce_min": "minimum", "argmax": "argmax", "argmin": "argmin"}


def nonempty_checks(name: str, shape: tuple, axes) -> list:
    """The host checks (``("nonempty", NumPy's name, size, axis)``) that a reduction without
    an identity makes before its loops: each reduced axis whose size is only known at run
    time (a symbolic dim that may be 0, a data-dependent size) must not be empty, or the
    loops would return the accumulator's start (-inf, 0) where NumPy raises ValueError.
    A size known when tracing is checked by the primitive's shape rule instead."""
    op = NO_IDENTITY.get(name)
    return [] if op is None else [("nonempty", op, shape[a], a) for a in axes if is_symbolic(shape[a])]


def lowering_kind(name: str, fusion_kind: str) -> str | None:
    """How Legalize lowers the primitive ``name`` (of FuseOps kind ``fusion_kind``):

    * "host": stays a graph binding that every runtime executes between kernels (a view, a
      shape check, or a data-dependent op run by its reference implementation);
    * "elementwise": one scalar ``Op`` of the same name, which each backend renders from
      its scalar-op table;
    * "compute": a compute rule (``COMPUTE``) mapping output indices to input elements;
    * "reduction": an accumulator loop (``REDUCERS`` / arg reductions);
    * "scan": an accumulator loop along one axis storing every step (``SCANS``);
    * "matmul": a BLAS library call for float32/float64, loops otherwise;
    * "library": a call of the library function ``LIBRARY_CALLS`` names (sorting);
    * "scatter": a copy of the operand, then a serial loop combining the updates in
      (``scatter_loops``);
    * None: no lowering (a primitive added without one).
    """
    if name in HOST_OPS:
        return "host"
    if name == "matmul":
        return "matmul"
    if name in SCANS:
        return "scan"
    if name in LIBRARY_CALLS:
        return "library"
    if name == "scatter":
        return "scatter"
    if fusion_kind == "reduction":
        return "reduction" if name in REDUCERS or name in ARG_REDUCTIONS else None
    if name in COMPUTE:
        return "compute"
    return "elementwise" if fusion_kind == "elementwise" else None


# ---------------------------------------------------------------------------------------
# Compute rules: out-index -> scalar expression
# ---------------------------------------------------------------------------------------

COMPUTE: dict[str, Callable] = {}


compute_rule = registrar(COMPUTE)


def broadcast_index(in_shape: tuple, idx: list) -> list:
    """Index into an operand that broadcasts (NumPy rules) to an output indexed by ``idx``."""
    lead = len(idx) - len(in_shape)
    return [Const(0, INDEX) if (isinstance(d, int) and d == 1) else idx[lead + k]
            for k, d in enumerate(in_shape)]


def elementwise_rule(name: str, idx: list, reads: list[Reader], in_types: list, out_type,
                     **params) -> Expr:
    args = [r(broadcast_index(t.shape, idx)) for r, t in zip(reads, in_types)]
    if name == "convert":
        return op("convert", args[0], dtype=out_type.dtype)
    return op(name, *args, dtype=out_type.dtype)


@compute_rule("broadcast_to")
def _broadcast_to(name, idx, reads, in_types, out_type, *, shape):
    return reads[0](broadcast_index(in_types[0].shape, idx))


@compute_rule("transpose")
def _transpose(name, idx, reads, in_types, out_type, *, perm):
    src = [None] * len(perm)
    for k, p in enumerate(perm):
        src[p] = idx[k]
    return reads[0](src)


@compute_rule("reshape")
def _reshape(name, idx, reads, in_types, out_type, *, new_sizes):
    return reads[0](reindex(idx, out_type.shape, in_types[0].shape))


def reindex(idx: list, out_shape: tuple, in_shape: tuple) -> list:
    """Row-major index conversion between two shapes of the same size.  Size-1 axes index
    at 0 and a common suffix of equal dims maps straight through, so (n, 1) -> (n,) is the
    identity and (n, 4) -> (n // 2, 2, 4) only linearizes a prefix."""
    keep_out = [k for k, d in enumerate(out_shape) if not (isinstance(d, int) and d == 1)]
    keep_in = [k for k, d in enumerate(in_shape) if not (isinstance(d, int) and d == 1)]
    if len(keep_out) < len(out_shape) or len(keep_in) < len(in_shape):
        inner = reindex([idx[k] for k in keep_out], tuple(out_shape[k] for k in keep_out),
                        tuple(in_shape[k] for k in keep_in))
        src = [Const(0, INDEX)] * len(in_shape)
        for k, i in zip(keep_in, inner):
            src[k] = i
        return src
    k = 0
    while (k < min(len(out_shape), len(in_shape)) - 0 and
           same_dim(out_shape[len(out_shape) - 1 - k], in_shape[len(in_shape) - 1 - k])):
        k += 1
    out_pre, in_pre = out_shape[:len(out_shape) - k], in_shape[:len(in_shape) - k]
    tail = idx[len(idx) - k:] if k else []
    flat = Const(0, INDEX)
    for i, d in zip(idx[:len(out_pre)], out_pre):
        flat = flat * from_sympy(d) + i
    src = []
    for d in reversed(in_pre[1:]):
        src.append(flat % from_sympy(d))
        flat = flat // from_sympy(d)
    if in_pre:
        src.append(flat)
    return list(reversed(src)) + list(tail)


@compute_rule("slice")
def _slice(name, idx, reads, in_types, out_type, *, start, size, step):
    return reads[0]([from_sympy(b) + i * from_sympy(s) for i, b, s in zip(idx, start, step)])


@compute_rule("concatenate")
def _concatenate(name, idx, reads, in_types, out_type, *, axis):
    offsets, off = [], sympy.Integer(0)
    for t in in_types:
        offsets.append(off)
        off = off + t.shape[axis]

    def part(k):
        j = list(idx)
        j[axis] = idx[axis] - from_sympy(offsets[k])
        return reads[k](j)
    if isinstance(idx[axis], Const) and all(o.is_Integer for o in offsets):
        # a known position reads its part alone (a complex value's re/im pair per point)
        return part(max(k for k, o in enumerate(offsets) if int(o) <= idx[axis].value))
    expr = part(len(reads) - 1)
    for k in range(len(reads) - 2, -1, -1):     # lazy branches: only the taken input is read
        expr = op("if_then_else", op("lt", idx[axis], from_sympy(offsets[k + 1])), part(k), expr,
                  dtype=out_type.dtype)
    return expr


def _within(idx: list, lows: list, highs: list) -> Expr | None:
    """``lows[k] <= idx[k] < highs[k]`` on every axis, as one bool expression (None for no
    axes)."""
    inside = None
    for i, lo, hi in zip(idx, lows, highs):
        c = op("and", op("ge", i, lo), op("lt", i, hi))
        inside = c if inside is None else op("and", inside, c)
    return inside


@compute_rule("pad")
def _pad(name, idx, reads, in_types, out_type, *, low, high):
    src = [i - from_sympy(lo) for i, lo in zip(idx, low)]
    inside = _within(src, [0] * len(src), [from_sympy(d) for d in in_types[0].shape])
    value = reads[1]([])
    if inside is None:
        return reads[0](src)
    return op("if_then_else", inside, reads[0](src), value, dtype=out_type.dtype)


@compute_rule("iota")
def _iota(name, idx, reads, in_types, out_type, *, shape, dimension, dtype):
    return op("convert", idx[dimension], dtype=out_type.dtype)


def _gather_index(j: Expr, d) -> Expr:
    """NumPy's negative indices count from the end.  Out-of-range indices are rejected by the
    caller before the call (``host_checks``); the clamp keeps the loops in bounds regardless."""
    n = from_sympy(d)
    j = op("select", op("lt", j, 0), j + n, j)
    return op("max", op("min", j, n - 1), 0)


@compute_rule("take")
def _take(name, idx, reads, in_types, out_type, *, axis):
    x, ind = in_types
    r = ind.ndim
    j = reads[1](idx[axis:axis + r])
    return reads[0](idx[:axis] + [_gather_index(j, x.shape[axis])] + idx[axis + r:])


@compute_rule("take_along_axis")
def _take_along_axis(name, idx, reads, in_types, out_type, *, axis):
    x, ind = in_types
    bidx = [Const(0, INDEX) if (k != axis and isinstance(d, int) and d == 1) else i
            for k, (i, d) in enumerate(zip(idx, ind.shape))]
    j = reads[1](bidx)
    xi = [Const(0, INDEX) if (k != axis and isinstance(d, int) and d == 1) else i
          for k, (i, d) in enumerate(zip(idx, x.shape))]
    xi[axis] = _gather_index(j, x.shape[axis])
    return reads[0](xi)


def _clamped_start(read, size, dim) -> Expr:
    """A dynamic start index (a scalar operand) clamped to ``[0, dim - size]``."""
    s = read([])
    if s.dtype != INDEX:
        s = op("convert", s, dtype=INDEX)
    return op("max", op("min", s, from_sympy(dim) - from_sympy(size)), 0)


@compute_rule("dynamic_slice")
def _dynamic_slice(name, idx, reads, in_types, out_type, *, sizes):
    x = in_types[0]
    starts = [_clamped_start(r, m, d) for r, m, d in zip(reads[1:], sizes, x.shape)]
    return reads[0]([s + i for s, i in zip(starts, idx)])


@compute_rule("dynamic_update_slice")
def _dynamic_update_slice(name, idx, reads, in_types, out_type):
    x, update = in_types[0], in_types[1]
    starts = [_clamped_start(r, m, d) for r, m, d in zip(reads[2:], update.shape, x.shape)]
    inside = _within(idx, starts, [s + from_sympy(m) for s, m in zip(starts, update.shape)])
    if inside is None:                               # 0-d: the update is the result
        return reads[1]([])
    return op("if_then_else", inside, reads[1]([i - s for i, s in zip(idx, starts)]),
              reads[0](idx), dtype=out_type.dtype)


@compute_rule("update_slice")
def _update_slice(name, idx, reads, in_types, out_type, *, start, size, step):
    """``out[i] = update[(i - start) / step]`` where ``i`` falls on the window, else ``x[i]``."""
    inside, src = None, []
    for i, b, n, s in zip(idx, start, size, step):
        off = i - from_sympy(b) if s > 0 else from_sympy(b) - i
        a = abs(s)
        c = op("and", op("ge", off, 0), op("lt", off, from_sympy(n) * a))
        if a != 1:
            c = op("and", c, op("eq", off % a, 0))
        inside = c if inside is None else op("and", inside, c)
        src.append(off if a == 1 else off // a)
    if inside is None:                               # 0-d: the update is the result
        return reads[1]([])
    return op("if_then_else", inside, reads[1](src), reads[0](idx), dtype=out_type.dtype)


# ---------------------------------------------------------------------------------------
# Scatter: a copy, then the updates one after the other
# ---------------------------------------------------------------------------------------

# scatter mode -> the scalar op that combines an update into the element (bools: or / and)
SCATTER_COMBINE = {"add": ("add", "or"), "mul": ("mul", "and"), "min": ("min", "and"),
                   "max": ("max", "or")}


def scatter_loops(x_type, idx_type, reads: list[Reader], out: tir.Buffer, *, axis: int,
                  mode: str, oob: str, taken: set) -> "tir.Stmt":
    """``out = x`` (an elementwise copy), then for every index position, serially so that
    duplicate indices accumulate in order: ``j = idx[q]`` (negative counts from the end; out
    of range skipped, or clamped for ``oob="clip"``) and ``out[.., j, ..] = combine(out[..,
    j, ..], updates[.., q, ..])``.  The axes before ``axis`` run in parallel."""
    shape = x_type.shape
    copy = tir.loop_nest([from_sympy(d) for d in shape],
                         lambda idx: Store(out, tuple(idx), reads[0](idx)),
                         default_loop_kinds(len(shape)), taken)
    d = from_sympy(shape[axis])
    post = [from_sympy(e) for e in shape[axis + 1:]]
    combine = None if mode == "set" else SCATTER_COMBINE[mode][dt.is_bool(out.dtype)]

    def body(iv):
        pre, q = list(iv[:axis]), list(iv[axis:])
        j = tir.fresh("j", taken)
        jv = reads[1](q)
        if jv.dtype != INDEX:
            jv = op("convert", jv, dtype=INDEX)
        jv = op("select", op("lt", jv, 0), jv + d, jv)
        if oob == "clip":
            jv = op("max", op("min", jv, d - 1), 0)

        def element(rv):
            at = tuple(pre + [j] + list(rv))
            v = reads[2](pre + q + list(rv))
            if combine is not None:
                v = op(combine, tir.Load(out, at), v, dtype=out.dtype)
            return Store(out, at, v)
        update = tir.loop_nest(post, element, ["serial"] * len(post), taken, prefix="k")
        if oob != "clip":
            update = tir.If(op("and", op("ge", j, 0), op("lt", j, d)), update)
        return Seq([Local(j, jv), update])
    extents = [from_sympy(e) for e in tuple(shape[:axis]) + tuple(idx_type.shape)]
    kinds = ["parallel" if k == 0 and axis > 0 else "serial" for k in range(len(extents))]
    return Seq([copy, tir.loop_nest(extents, body, kinds, taken, prefix="s")])


# ---------------------------------------------------------------------------------------
# Reductions: (init, combine) over the reduced axes, accumulated in a local
# ---------------------------------------------------------------------------------------

def _lowest(dtype):
    return -np.inf if dt.is_float(dtype) else (False if dt.is_bool(dtype) else np.iinfo(dtype).min)


def _highest(dtype):
    return np.inf if dt.is_float(dtype) else (True if dt.is_bool(dtype) else np.iinfo(dtype).max)


REDUCERS = {
    "reduce_sum": (lambda d: 0, "add"),
    "reduce_prod": (lambda d: 1, "mul"),
    "reduce_max": (_lowest, "max"),
    "reduce_min": (_highest, "min"),
    "reduce_and": (lambda d: True, "and"),
    "reduce_or": (lambda d: False, "or"),
}


def scalar_const(v: bool | int | float, dtype) -> Const:
    if dt.is_bool(dtype):
        return Const(bool(v), BOOL)
    if dt.is_float(dtype):
        return Const(float(v), np.dtype(dtype))
    return Const(int(v), np.dtype(dtype))


class Accumulator:
    """The running value of a reduction: a local of ``dtype`` (float16 sums and products in
    float32, as NumPy's pairwise sum effectively does), its initial value and the op that
    folds an element in (on bools, max is or and min is and)."""

    def __init__(self, reducer: str, out_dtype, *, widen: bool = True):
        init, combine = REDUCERS[reducer]
        self.out_dtype = np.dtype(out_dtype)
        # not ``widen``: a scan rounds every step to the output dtype, as NumPy's accumulate does
        widened = widen and self.out_dtype == np.dtype("float16") and \
            reducer in ("reduce_sum", "reduce_prod")
        self.dtype = np.dtype("float32") if widened else self.out_dtype
        if dt.is_bool(self.out_dtype) and reducer in ("reduce_max", "reduce_min"):
            combine = "or" if reducer == "reduce_max" else "and"
        self.combine = combine
        self.init = scalar_const(init(self.dtype), self.dtype)

    def update(self, acc: tir.Var, x: Expr, *, reorderable: bool = True) -> Assign:
        """``acc = combine(acc, x)``; ``reorderable``: the backends may vectorize it (a
        reduction, not a scan, whose every partial value is stored)."""
        if x.dtype != self.dtype:
            x = op("convert", x, dtype=self.dtype)
        flags = ("reassoc",) if reorderable else ()
        return Assign(acc, op(self.combine, acc, x, dtype=self.dtype, flags=flags))

    def result(self, acc: tir.Var) -> Expr:
        return acc if self.dtype == self.out_dtype else op("convert", acc, dtype=self.out_dtype)


def reduction_body(name: str, out_idx: list, reads: list[Reader], in_type, out_type,
                   axes: tuple, store: Callable[[Expr], Store], taken: set) -> "tir.Stmt":
    """``acc = init; for r...: acc = combine(acc, x[...]); store(acc)``."""
    x_shape = in_type.shape
    red_axes = [a for a in range(len(x_shape)) if a in axes]
    rvars = [tir.fresh(f"r{k}", taken) for k in range(len(red_axes))]
    full, it_out, it_red = [], iter(out_idx), iter(rvars)
    for a in range(len(x_shape)):
        full.append(next(it_red) if a in axes else next(it_out))
    if name in ARG_REDUCTIONS:
        return _arg_reduction(name, full, rvars, red_axes, x_shape, reads, out_type, store, taken)
    accum = Accumulator(name, out_type.dtype)
    acc = tir.fresh("acc", taken, accum.dtype)
    update: "tir.Stmt" = accum.update(acc, reads[0](full))
    for v, a in reversed(list(zip(rvars, red_axes))):
        update = For(v, from_sympy(x_shape[a]), "reduction", update)
    return Seq([Local(acc, accum.init), update, store(accum.result(acc))])


def scan_loops(name: str, reads: list[Reader], in_type, out: tir.Buffer, axis: int,
               taken: set) -> "tir.Stmt":
    """``for other axes (parallel): acc = init; for i along axis: acc = combine(acc, x[..i..]);
    out[..i..] = acc``."""
    shape = in_type.shape
    outer_axes = [a for a in range(len(shape)) if a != axis]
    accum = Accumulator(SCANS[name], out.dtype, widen=False)

    def body(idx):
        i = tir.fresh("s", taken)
        acc = tir.fresh("acc", taken, accum.dtype)
        full = list(idx)
        full.insert(axis, i)
        step = Seq([accum.update(acc, reads[0](full), reorderable=False),
                    Store(out, tuple(full), accum.result(acc))])
        return Seq([Local(acc, accum.init), For(i, from_sympy(shape[axis]), "serial", step)])
    # the outermost other axis splits across threads; none is vectorized (a loop is inside)
    kinds = ["parallel"] + ["serial"] * (len(outer_axes) - 1) if outer_axes else []
    return tir.loop_nest([from_sympy(shape[a]) for a in outer_axes], body, kinds, taken)


def _arg_reduction(name, full, rvars, red_axes, x_shape, reads, out_type, store, taken):
    (r,), (a,) = rvars, red_axes
    first = list(full)
    first[a] = Const(0, INDEX)
    x0 = reads[0](first)
    best = tir.fresh("best", taken, x0.dtype)
    best_i = tir.fresh("best_i", taken)
    v = reads[0](full)
    better = op("gt" if name == "argmax" else "lt", v, best)
    if dt.is_float(x0.dtype):      # the first NaN wins, as in NumPy
        better = op("or", better, op("and", op("ne", v, v), op("eq", best, best)))
    body = tir.If(better, Seq([Assign(best, v), Assign(best_i, r)]))
    loop = For(r, from_sympy(x_shape[a]), "reduction", body, start=Const(1, INDEX))
    return Seq([Local(best, x0), Local(best_i, Const(0, INDEX)), loop, store(best_i)])


# ---------------------------------------------------------------------------------------
# Helpers for building programs
# ---------------------------------------------------------------------------------------

def buffer_names(taken: set) -> Iterator[str]:
    """Buffer names that cannot be confused with the program's dim variables."""
    for c in itertools.chain("abcdefgh", (f"a{k}" for k in itertools.count())):
        if c not in taken:
            yield c


def scalar_literal_expr(a: object) -> Expr | None:
    """A scalar literal operand (a number or a symbolic dim used as a value) as a constant
    expression inside a program; None for arrays, which are passed as buffers."""
    if not isinstance(a, Literal) or a.type.ndim != 0 or np.ndim(a.value) != 0:
        return None
    v = a.value
    if is_symbolic(v):
        return op("convert", from_sympy(v), dtype=a.type.dtype) if a.type.dtype != INDEX else from_sympy(v)
    return scalar_const(np.asarray(v).item(), a.type.dtype)


def default_loop_kinds(rank: int) -> list[str]:
    """Loop kinds for a nest over an output: the outermost loop parallel, the innermost
    vectorized."""
    kinds = ["serial"] * rank
    if rank:
        kinds[-1] = "vectorized"
        kinds[0] = "parallel"
    return kinds
