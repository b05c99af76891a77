"""Legalize: lower graph primitives to loop-level programs (``call_tir``) or library calls
(``call_library``), leaving a cross-level graph function.  A primitive binding becomes one
program built from its compute rule (``lowering``); a fused group (from FuseOps) becomes one
program through FuseTIR, or op by op when it does not fit one.  Host operations
(``lowering.HOST_OPS``) stay graph-level bindings that the runtimes execute themselves.
"""
from __future__ import annotations

import functools

from ..core import PRIMITIVES
from ..ir import Binding, Function, IRModule, Literal, TensorType, Var, regions
from ..library import LibraryFunc
from ..shapes import prod
from .. import tir
from ..tir import Buffer, For, Local, PrimFunc, Seq, Store, from_sympy, op
from .fuse_tir import FusionError, call_site_values, lower_fused_call
from .dce import dce_function
from .blas_calls import SYRK, gemm_call, gram_operand, mirror_program
from .mask_bounds import bound_masked_loops
from .lowering import (BLAS, COMPUTE, HOST_OPS, LIBRARY_CALLS, Accumulator, broadcast_index,
                       buffer_names, default_loop_kinds, elementwise_rule, lowering_kind,
                       nonempty_checks, reduction_body, scalar_literal_expr, scan_loops, scatter_loops)
from .passes import Pass

__all__ = ["HOST_OPS", "legalize", "lower_binding", "primfunc_for", "unlowered", "check_lowered"]


def _operands(args, taken: set):
    """Buffers for array operands; scalar literals become constants inside the program."""
    buffers, reads, call_args = [], [], []
    names = buffer_names(set(taken))
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
    how = lowering_kind(name, b.callee.kind)
    if how in (None, "host", "library"):
        raise NotImplementedError(f"primitive {name} has no loop-level lowering")
    checks = []
    if how == "reduction":
        axes = b.params["axes"] if "axes" in b.params else (b.params["axis"],)
        checks += nonempty_checks(name, in_types[0].shape, axes)
        body = tir.loop_nest(extents, lambda idx: reduction_body(
            name, idx, reads, in_types[0], out_type, axes, lambda v: Store(ob, tuple(idx), v), taken),
            default_loop_kinds(rank), taken)
    elif how == "matmul":
        body = _matmul_loops(buffers, ob, in_types, out_type, taken)
    elif how == "scan":
        body = scan_loops(name, reads, in_types[0], ob, b.params["axis"], taken)
    elif how == "scatter":
        body = scatter_loops(in_types[0], in_types[1], reads, ob, taken=taken, **b.params)
    else:
        rule = COMPUTE[name] if how == "compute" else elementwise_rule
        body = tir.loop_nest(extents, lambda idx: Store(
            ob, tuple(idx), rule(name, list(idx), reads, in_types, out_type, **b.params)),
            default_loop_kinds(rank), taken, drop_unit=True)
    params = buffers + [ob]
    if (name in ("take", "take_along_axis") or name == "scatter" and b.params["oob"] == "error") \
            and isinstance(b.args[1], Var):
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
    accum = Accumulator("reduce_sum", out_type.dtype)

    def body(idx):
        batch, i, j = idx[:nb], idx[nb], idx[nb + 1]
        k = tir.fresh("k", taken)
        acc = tir.fresh("acc", taken, accum.dtype)
        ai = broadcast_index(at.shape[:-2], batch) + [i, k]
        bi = broadcast_index(bt.shape[:-2], batch) + [k, j]
        prod = op("mul", a[tuple(ai)], bm[tuple(bi)])
        return Seq([Local(acc, accum.init), For(k, kdim, "reduction", accum.update(acc, prod)),
                    Store(ob, tuple(idx), accum.result(acc))])
    return tir.loop_nest(extents, body, default_loop_kinds(len(shape)), taken)


def lower_binding(b: Binding, name_id: int = 0, defs: dict | None = None, views: bool = False) -> list:
    """The binding as a call_tir or call_library (a Gram product as syrk and a program
    that mirrors its triangle: ``gram``; ``views``: a product's transposed operands read in
    place where they keep their last axis, ``blas_calls.gemm_call``), or unchanged for host
    operations."""
    if b.kind != "primitive":
        return [b]
    how = lowering_kind(b.callee.name, b.callee.kind)
    if how == "host":
        return [b]
    if how == "matmul" and b.outvars[0].type.dtype in BLAS:
        dtype = b.outvars[0].type.dtype
        gram = gram_operand(b, list(b.args), defs or {})
        if gram is None:
            name, args, params = gemm_call(b, list(b.args), defs or {}, BLAS[dtype], views)
            return [Binding(b.outvars, LibraryFunc(name), args, params, b.source)]
        tri = Var(b.outvars[0].type)
        return [Binding([tri], LibraryFunc(SYRK[dtype, gram[1]]), [gram[0]], {}, b.source),
                Binding(b.outvars, mirror_program(tri.type, f"mirror_{name_id}"), [tri], {}, b.source)]
    if how == "library":
        return [Binding(b.outvars, LibraryFunc(LIBRARY_CALLS[b.callee.name]), list(b.args), {}, b.source)]
    if b.callee.name == "transpose":
        merged = _coalesced_transpose(b, name_id)
        if merged is not None:
            return merged
    fn, args = primfunc_for(b, name_id)
    tir.verify_primfunc(fn)
    return [Binding(b.outvars, fn, args, {}, b.source)]


def _coalesced_transpose(b: Binding, name_id: int) -> list | None:
    """A transpose whose axes move in runs (input axes adjacent and in order that stay so in
    the output) as one of the runs merged: the reshapes around it are views, and the
    program's loop nest and index arithmetic shrink to the runs' count (a rank-8 transpose
    between two complex gemms moving three blocks of axes is a rank-3 one).  None when no
    two axes merge."""
    x, out = b.args[0], b.outvars[0]
    perm = tuple(b.params["perm"])
    runs: list = []                     # output order: each run's input axes
    for a in perm:
        if runs and runs[-1][-1] + 1 == a:
            runs[-1].append(a)
        else:
            runs.append([a])
    if len(runs) == len(perm):
        return None
    order = sorted(range(len(runs)), key=lambda r: runs[r][0])     # runs in input order
    shape = x.type.shape
    in_sizes = tuple(prod(shape[a] for a in runs[r]) for r in order)
    new_perm = tuple(order.index(r) for r in range(len(runs)))
    out_sizes = tuple(in_sizes[k] for k in new_perm)
    reshape = PRIMITIVES["reshape"]
    if new_perm == tuple(range(len(runs))):       # the data does not move: a view
        return [Binding(b.outvars, reshape, [x], {"new_sizes": tuple(out.type.shape)}, b.source)]
    xin = Var(TensorType(in_sizes, x.type.dtype))
    moved = Var(TensorType(out_sizes, x.type.dtype))
    t = Binding([moved], b.callee, [xin], {"perm": new_perm}, b.source)
    fn, args = primfunc_for(t, name_id)
    tir.verify_primfunc(fn)
    return [Binding([xin], reshape, [x], {"new_sizes": in_sizes}, b.source),
            Binding([moved], fn, args, {}, b.source),
            Binding(b.outvars, reshape, [moved], {"new_sizes": tuple(out.type.shape)}, b.source)]


def _inline(b: Binding) -> list:
    """The bindings of a called sub-function, with its parameters and results replaced."""
    value_of = call_site_values(b)
    return [Binding([value_of.get(v, v) for v in x.outvars], x.callee,
                    [value_of.get(a, a) if isinstance(a, Var) else a for a in x.args], x.params, x.source)
            for x in b.callee.bindings]


def _lower_call(b: Binding, name_id: int, defs: dict, views: bool) -> list:
    if b.kind == "function" and b.callee.attrs.get("primitive"):
        try:
            return lower_fused_call(b, b.callee.name, defs, views)
        except FusionError:               # not expressible as one program: lower op by op
            return [nb for x in _inline(b) for nb in lower_binding(x, name_id, defs, views)]
    return lower_binding(b, name_id, defs, views)


def _producers(f: Function) -> dict:
    """Value -> the primitive binding computing it (FuseOps leaves a lone transpose one)."""
    return {v: b for b in f.bindings if b.kind == "primitive" for v in b.outvars}


def _legalize(module: IRModule, views: bool = False) -> IRModule:
    fns = dict(module.functions)
    lowered_subs = set()
    created = set()
    for name, f in module.functions.items():
        if not isinstance(f, Function) or f.attrs.get("primitive"):
            continue
        bindings = []
        seen: dict = {}
        defs = _producers(f)
        for b in f.bindings:
            if b.kind == "function" and b.callee.attrs.get("primitive"):
                lowered_subs.add(b.callee.name)
            for nb in _lower_call(b, len(seen), defs, views):
                if nb.kind == "tir":           # one program per distinct computation
                    bound_masked_loops(nb.callee)
                    key = nb.callee.signature_text()
                    if key in seen:
                        nb = Binding(nb.outvars, seen[key], nb.args, nb.params, nb.source)
                    else:
                        seen[key] = nb.callee
                        fns[nb.callee.name] = nb.callee
                        created.add(nb.callee.name)
                bindings.append(nb)
        # a transpose that only fed a BLAS call (now reading its operand) is dead
        fns[name] = dce_function(Function(f.name, f.params, f.param_names, bindings, f.results,
                                          f.bounds, f.guards, f.attrs))
    for n in lowered_subs:                     # fused sub-functions now live as programs
        if isinstance(fns.get(n), Function):
            del fns[n]
    called = {b.callee.name for f in fns.values() if isinstance(f, Function) for b in f.bindings}
    for n in created - called:                 # programs of bindings DCE dropped
        del fns[n]
    return IRModule(fns, module.entry)


legalize = Pass("Legalize", _legalize)
# for a backend whose products read strided operands in place (``blas_calls.rows_view``)
legalize_views = Pass("Legalize", functools.partial(_legalize, views=True))


def unlowered(fn: Function) -> list[str]:
    """What a backend that runs loop-level programs cannot run in ``fn``: primitives other
    than host operations, and fused groups not yet lowered (by name, in program order)."""
    left = []
    for b in fn.bindings:
        if b.kind == "primitive" and b.callee.name not in HOST_OPS or b.kind == "function":
            left.append(b.callee.name)
        for r in regions(b):
            left += unlowered(r.main)
    return left


def check_lowered(module: IRModule, backend: str) -> None:
    """Raise ValueError unless Legalize has lowered ``module`` (what the driver guarantees
    before it hands a module to ``backend``)."""
    left = unlowered(module.main)
    if left:
        raise ValueError(f"the {backend} backend runs lowered modules; {', '.join(dict.fromkeys(left))} "
                         f"is not lowered: run the Legalize pass (relaxjax.compile.legalize.legalize) "
                         f"last in the pipeline")

