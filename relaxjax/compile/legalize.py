"""Legalize: lower graph primitives to loop-level programs (``call_tir``) or library calls
(``call_library``), leaving a cross-level graph function.

Each primitive's loop-level meaning is a *compute rule*: given the output element's index
(loop variables) and a reader per operand, return the scalar expression for that element.
Elementwise primitives share one rule (an ``Op`` named like the primitive, so a backend adds
one scalar lowering per primitive); layout primitives map indices; reductions build an
accumulator loop.  Compute rules compose by substituting a producer's expression for a
reader, which is how fusion (a later pass) inlines producers into consumers.

Left at the graph level, as host operations: ``reshape`` (a zero-copy view of a row-major
buffer), ``match_cast`` (a run-time shape check), and the data-dependent ``nonzero`` and
``boolean_mask``, whose output size is only known after reading the data.
"""
from __future__ import annotations

import itertools
from typing import Callable

import numpy as np
import sympy

from .. import dtypes as dt
from ..ir import Binding, Function, IRModule, Literal, Var
from ..library import LibraryFunc  # noqa: F401  (the callee of call_library; fuse_tir imports it here)
from ..shapes import free_symbols, is_symbolic
from .. import tir
from ..tir import (INDEX, BOOL, Buffer, Const, Expr, For, Local, Assign, PrimFunc, Seq, Store,
                  from_sympy, op)
from .passes import Pass

HOST_OPS = {"reshape", "match_cast", "nonzero", "boolean_mask"}

Reader = Callable[[list], Expr]


# ---------------------------------------------------------------------------------------
# Compute rules: out-index -> scalar expression
# ---------------------------------------------------------------------------------------

COMPUTE: dict[str, Callable] = {}


def compute_rule(*names):
    def deco(fn):
        for n in names:
            COMPUTE[n] = fn
        return fn
    return deco


def broadcast_index(in_shape: tuple, idx: list) -> list:
    """Index into an operand that broadcasts (NumPy rules) to an output indexed by ``idx``."""
    lead = len(idx) - len(in_shape)
    return [Const(0, INDEX) if (isinstance(d, int) and d == 1) else idx[lead + k]
            for k, d in enumerate(in_shape)]


def elementwise_rule(name, idx, reads, in_types, out_type, **params):
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
           _same_dim(out_shape[len(out_shape) - 1 - k], in_shape[len(in_shape) - 1 - k])):
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


def _same_dim(a, b) -> bool:
    return (a == b) if isinstance(a, int) or isinstance(b, int) else sympy.simplify(a - b) == 0


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
    expr = part(len(reads) - 1)
    for k in range(len(reads) - 2, -1, -1):     # lazy branches: only the taken input is read
        expr = op("if_then_else", op("lt", idx[axis], from_sympy(offsets[k + 1])), part(k), expr,
                  dtype=out_type.dtype)
    return expr


@compute_rule("pad")
def _pad(name, idx, reads, in_types, out_type, *, low, high):
    src = [i - from_sympy(lo) for i, lo in zip(idx, low)]
    inside = None
    for s, d in zip(src, in_types[0].shape):
        c = op("and", op("ge", s, 0), op("lt", s, from_sympy(d)))
        inside = c if inside is None else op("and", inside, c)
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


# ---------------------------------------------------------------------------------------
# Reductions: (init, combine) over the reduced axes, accumulated in a local
# ---------------------------------------------------------------------------------------

def _lowest(dtype):
    return -np.inf if dt.is_float(dtype) else (False if dt.is_bool(dtype) else np.iinfo(dtype).min)


def _highest(dtype):
    return np.inf if dt.is_float(dtype) else (True if dt.is_bool(dtype) else np.iinfo(dtype).max)


def _acc_dtype(name, dtype):
    # float16 accumulates in float32, as NumPy's pairwise sum effectively does
    return np.dtype("float32") if dtype == np.dtype("float16") and name in ("reduce_sum", "reduce_prod") \
        else dtype


REDUCERS = {
    "reduce_sum": (lambda d: 0, "add"),
    "reduce_prod": (lambda d: 1, "mul"),
    "reduce_max": (_lowest, "max"),
    "reduce_min": (_highest, "min"),
    "reduce_and": (lambda d: True, "and"),
    "reduce_or": (lambda d: False, "or"),
}


def _const(v, dtype) -> Const:
    if dt.is_bool(dtype):
        return Const(bool(v), BOOL)
    if dt.is_float(dtype):
        return Const(float(v), np.dtype(dtype))
    return Const(int(v), np.dtype(dtype))


def reduction_body(name, out_idx, reads, in_type, out_type, axes, store, taken) -> "tir.Stmt":
    """``acc = init; for r...: acc = combine(acc, x[...]); store(acc)``."""
    x_shape = in_type.shape
    red_axes = [a for a in range(len(x_shape)) if a in axes]
    rvars = [tir.fresh(f"r{k}", taken) for k in range(len(red_axes))]
    full, it_out, it_red = [], iter(out_idx), iter(rvars)
    for a in range(len(x_shape)):
        full.append(next(it_red) if a in axes else next(it_out))
    value = reads[0](full)
    if name in ("argmax", "argmin"):
        return _arg_reduction(name, full, rvars, red_axes, x_shape, reads, out_type, store, taken)
    init, combine = REDUCERS[name]
    acc_t = _acc_dtype(name, out_type.dtype)
    if dt.is_bool(out_type.dtype) and name in ("reduce_max", "reduce_min"):
        combine = "or" if name == "reduce_max" else "and"
    if value.dtype != acc_t:
        value = op("convert", value, dtype=acc_t)
    acc = tir.fresh("acc", taken, acc_t)
    update: "tir.Stmt" = Assign(acc, op(combine, acc, value, dtype=acc_t, flags=("reassoc",)))
    for v, a in reversed(list(zip(rvars, red_axes))):
        update = For(v, from_sympy(x_shape[a]), "reduction", update)
    result = acc if acc_t == out_type.dtype else op("convert", acc, dtype=out_type.dtype)
    return Seq([Local(acc, _const(init(acc_t), acc_t)), update, store(result)])


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
# Building a PrimFunc for one binding
# ---------------------------------------------------------------------------------------

def _buffer_names(taken: set):
    """Buffer names that cannot be confused with the program's dim variables."""
    for c in itertools.chain("abcdefgh", (f"a{k}" for k in itertools.count())):
        if c not in taken:
            yield c


def scalar_literal_expr(a) -> Expr | None:
    """A scalar literal operand (a number or a symbolic dim used as a value) as a constant
    expression inside a program; None for arrays, which are passed as buffers."""
    if not isinstance(a, Literal) or a.type.ndim != 0 or np.ndim(a.value) != 0:
        return None
    v = a.value
    if is_symbolic(v):
        return op("convert", from_sympy(v), dtype=a.type.dtype) if a.type.dtype != INDEX else from_sympy(v)
    return _const(np.asarray(v).item(), a.type.dtype)


def _operands(args, taken: set):
    """Buffers for array operands; scalar literals become constants inside the program."""
    buffers, reads, call_args = [], [], []
    names = _buffer_names(set(taken))
    for k, a in enumerate(args):
        e = scalar_literal_expr(a)
        if e is not None:
            reads.append(lambda idx, e=e: e)
            continue
        b = Buffer(next(names), tuple(a.type.shape), a.type.dtype)
        taken.add(b.name)
        buffers.append(b)
        call_args.append(a)
        reads.append(lambda idx, b=b: b[tuple(idx)])
    return buffers, reads, call_args


def _loop_kinds(rank: int) -> list:
    kinds = ["serial"] * rank
    if rank:
        kinds[-1] = "vectorized"
        kinds[0] = "parallel"
    return kinds


def primfunc_for(b: Binding, name_id: int = 0) -> tuple[PrimFunc, list]:
    """The loop-level program for one primitive binding, and the graph args it is called with."""
    name = b.callee.name
    in_types = [a.type for a in b.args]
    out = b.outvars[0]
    out_type = out.type
    taken = set(tir.dim_vars([a.type.shape for a in b.args], out_type.shape, b.params))
    ob = Buffer("out" if "out" not in taken else "out_", tuple(out_type.shape), out_type.dtype)
    taken |= {ob.name}
    buffers, reads, call_args = _operands(b.args, taken)
    rank = len(out_type.shape)
    extents = [from_sympy(d) for d in out_type.shape]
    if b.callee.kind == "reduction":
        axes = b.params["axes"] if "axes" in b.params else (b.params["axis"],)
        body = tir.loop_nest(extents, lambda idx: reduction_body(
            name, idx, reads, in_types[0], out_type, axes, lambda v: Store(ob, tuple(idx), v), taken),
            _loop_kinds(rank), taken)
    elif name == "matmul":
        body = _matmul_loops(buffers, ob, in_types, out_type, taken)
    else:
        rule = COMPUTE.get(name, elementwise_rule if b.callee.kind == "elementwise" else None)
        if rule is None:
            raise NotImplementedError(f"primitive {name} has no loop-level lowering")
        body = tir.loop_nest(extents, lambda idx: Store(
            ob, tuple(idx), rule(name, list(idx), reads, in_types, out_type, **b.params)),
            _loop_kinds(rank), taken)
    params = buffers + [ob]
    checks = []
    if name in ("take", "take_along_axis") and isinstance(b.args[1], Var):
        axis = b.params["axis"]
        checks.append(("index_range", call_args.index(b.args[1]), in_types[0].shape[axis], axis))
    fn = PrimFunc(f"{name}_{name_id}", params, 1, tir.dim_vars(params, b.params, [a.value for a in b.args if isinstance(a, Literal)]), body,
                  checks)
    return fn, call_args


def _matmul_loops(buffers, ob, in_types, out_type, taken) -> "tir.Stmt":
    """Integer (and float16) matmul as loops: i, k, j order so the inner loop is contiguous."""
    a, bm = buffers
    at, bt = in_types
    shape = out_type.shape
    nb = len(shape) - 2
    extents = [from_sympy(d) for d in shape]
    kdim = from_sympy(at.shape[-1])
    acc_t = _acc_dtype("reduce_sum", out_type.dtype)

    def body(idx):
        batch, i, j = idx[:nb], idx[nb], idx[nb + 1]
        k = tir.fresh("k", taken)
        acc = tir.fresh("acc", taken, acc_t)
        ai = broadcast_index(at.shape[:-2], batch) + [i, k]
        bi = broadcast_index(bt.shape[:-2], batch) + [k, j]
        prod = op("mul", a[tuple(ai)], bm[tuple(bi)])
        if prod.dtype != acc_t:
            prod = op("convert", prod, dtype=acc_t)
        res = acc if acc_t == out_type.dtype else op("convert", acc, dtype=out_type.dtype)
        return Seq([Local(acc, _const(0, acc_t)),
                    For(k, kdim, "reduction", Assign(acc, op("add", acc, prod, flags=("reassoc",)))),
                    Store(ob, tuple(idx), res)])
    return tir.loop_nest(extents, body, _loop_kinds(len(shape)), taken)


BLAS = {np.dtype("float32"): "blas.sgemm", np.dtype("float64"): "blas.dgemm"}


def lower_binding(b: Binding, name_id: int = 0) -> Binding:
    """The binding as a call_tir or call_library, or unchanged for host operations."""
    if b.kind != "primitive" or b.callee.name in HOST_OPS:
        return b
    if b.callee.name == "matmul" and b.outvars[0].type.dtype in BLAS:
        lib = LibraryFunc(BLAS[b.outvars[0].type.dtype])
        return Binding(b.outvars, lib, list(b.args), {}, b.source)
    fn, args = primfunc_for(b, name_id)
    tir.verify_primfunc(fn)
    return Binding(b.outvars, fn, args, {}, b.source)


def _inline(b: Binding) -> list:
    """The bindings of a called sub-function, with its parameters and results replaced."""
    sub = b.callee
    value_of = dict(zip(sub.params, b.args))
    value_of.update(zip(sub.results, b.outvars))
    return [Binding([value_of.get(v, v) for v in x.outvars], x.callee,
                    [value_of.get(a, a) if isinstance(a, Var) else a for a in x.args], x.params, x.source)
            for x in sub.bindings]


def _lower_call(b: Binding, name_id: int) -> list:
    if b.kind == "function" and b.callee.attrs.get("primitive"):
        from .fuse_tir import FusionError, lower_fused_call
        try:
            return lower_fused_call(b, b.callee.name)
        except FusionError:               # not expressible as one program: lower op by op
            return [lower_binding(x, name_id) for x in _inline(b)]
    return [lower_binding(b, name_id)]


def _legalize(module: IRModule) -> IRModule:
    fns = dict(module.functions)
    lowered_subs = set()
    for name, f in module.functions.items():
        if not isinstance(f, Function) or f.attrs.get("primitive"):
            continue
        bindings = []
        seen: dict = {}
        for b in f.bindings:
            if b.kind == "function" and b.callee.attrs.get("primitive"):
                lowered_subs.add(b.callee.name)
            for nb in _lower_call(b, len(seen)):
                if nb.kind == "tir":           # one program per distinct computation
                    key = nb.callee.signature_text()
                    if key in seen:
                        nb = Binding(nb.outvars, seen[key], nb.args, nb.params, nb.source)
                    else:
                        seen[key] = nb.callee
                        fns[nb.callee.name] = nb.callee
                bindings.append(nb)
        fns[name] = Function(f.name, f.params, f.param_names, bindings, f.results, f.bounds, f.guards, f.attrs)
    for n in lowered_subs:                     # fused sub-functions now live as programs
        if isinstance(fns.get(n), Function):
            del fns[n]
    return IRModule(fns, module.entry)


legalize = Pass("Legalize", _legalize)
