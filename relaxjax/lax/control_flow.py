"""Structured control flow with JAX's names and semantics: ``fori_loop``, ``while_loop``,
``scan``, ``map``, ``cond`` and ``switch``.

Each is one primitive whose params hold its *regions*: the loop body, the loop condition or
the branches, each traced once (in a child :class:`~relaxjax.core.TraceContext` sharing the
shape env, so symbolic dims are the caller's) into an :class:`~relaxjax.ir.IRModule` of its
own.  Values of the enclosing function used in a region are captured as extra parameters
(closure conversion) and passed in by the binding.  Trip counts may be ints, symbolic dims
or traced integers; carries may have symbolic shapes, which a loop keeps (proved, or guarded
in automatic mode).  Passes run over regions like any module, and every backend compiles a
region as a module of its own and drives the iterations (``relaxjax.backends.control_flow``).

Called on NumPy arrays outside a trace, each runs as the plain Python loop or branch it
stands for.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import optree

from .. import dtypes as dt
from ..core import Primitive, Tracer, TraceContext, current_trace, find_trace
from ..errors import ShapeError
from ..ir import IRModule, Literal, TensorType
from ..shapes import SymbolicDim, dim_str, is_symbolic
from .complex_parts import packed
from .ad_util import zeros_like
from .elementwise import add, convert, max as _max, ne, sub
from .indexing import iota_count

CONTROL_FLOW = ("fori_loop", "while_loop", "scan", "cond")


# ---------------------------------------------------------------------------------------
# The primitives: outputs are typed by their regions
# ---------------------------------------------------------------------------------------

def _out_types(name: str, params: dict) -> list[TensorType]:
    """The binding's result types, read from its regions (so a substitution of dims in the
    regions retypes the results alike): a loop's carry is its body's carry parameters."""
    if name == "cond":
        return [r.type for r in params["branches"][0].main.results]
    body, n = params["body"].main, params["n_carry"]
    # the loop index, or a scan's slices of xs, come before the carry
    first = 1 if name == "fori_loop" else params["n_xs"] if name == "scan" else 0
    carry = [p.type for p in body.params[first:first + n]]
    if name != "scan":
        return carry
    return carry + [TensorType((params["length"],) + r.type.shape, r.type.dtype)
                    for r in body.results[n:]]


def _control_primitive(name: str) -> Primitive:
    def impl(*args, **params):
        raise NotImplementedError(f"{name} runs through a backend (its regions are IR modules); "
                                  f"call relaxjax.lax.{name} on NumPy arrays to run it eagerly")
    return Primitive(
        name, kind="control", multiple_results=True, impl=impl,
        shape_rule=lambda env, *types, **p: [t.shape for t in _out_types(name, p)],
        dtype_rule=lambda *types, **p: [t.dtype for t in _out_types(name, p)],
        weak_rule=lambda *types, **p: [t.weak for t in _out_types(name, p)],
        complex_rule=packed(name))


fori_loop_p = _control_primitive("fori_loop")
while_loop_p = _control_primitive("while_loop")
scan_p = _control_primitive("scan")
cond_p = _control_primitive("cond")


# ---------------------------------------------------------------------------------------
# Tracing regions
# ---------------------------------------------------------------------------------------

def _type_of(ctx: TraceContext, x) -> TensorType:
    if isinstance(x, Tracer) and x.ctx is ctx:
        return x.type
    return ctx.atom(x).type


class _Region:
    """One traced region: its module, its results' types and the outer values it captured."""

    def __init__(self, module: IRModule, out_types: list, out_tree, captured: list):
        self.module, self.out_types, self.out_tree, self.captured = module, out_types, out_tree, captured


def _trace_region(fun: Callable, in_types: Sequence[TensorType], in_tree, name: str,
                  what: str, out_types: Sequence[TensorType] | None = None) -> _Region:
    """Trace ``fun(*tree_unflatten(in_tree, params))`` in a child context.  With
    ``out_types``, the results are converted to those dtypes (a carry widened by a body)."""
    parent = current_trace()
    ctx = TraceContext(parent.env, parent)
    with ctx:
        params = [ctx.new_param(TensorType(t.shape, t.dtype, t.weak), f"p{k}") for k, t in enumerate(in_types)]
        param_vars = [p.atom for p in params]     # before the body rebinds them (x[i] = v)
        out = fun(*optree.tree_unflatten(in_tree, params))
        leaves, tree = optree.tree_flatten(out, none_is_leaf=False)
        atoms = []
        for k, leaf in enumerate(leaves):
            if not isinstance(leaf, (Tracer, SymbolicDim, np.ndarray, np.generic, bool, int, float)):
                raise TypeError(f"{what} returned a {type(leaf).__name__} at {_path(tree, k)}; "
                                f"it must return arrays, scalars or pytrees of them")
            if out_types is not None and _type_of(ctx, leaf).dtype != out_types[k].dtype:
                t = out_types[k]
                leaf = convert.bind(leaf, dtype=t.dtype, weak=t.weak)
            atoms.append(ctx.atom(leaf))
    captured = list(ctx.captured.values())
    fn = ctx.finalize(name, param_vars + [v for _, v in captured],
                      [f"p{k}" for k in range(len(params))] + [f"c{k}" for k in range(len(captured))],
                      atoms)
    fn.guards = []                    # the enclosing function holds the trace's guards
    parent.respecializers.update(ctx.respecializers)
    return _Region(IRModule({name: fn}, name), [a.type for a in fn.results], tree,
                   [outer for outer, _ in captured])


def _path(tree, k: int) -> str:
    return "".join(f"[{p!r}]" for p in optree.treespec_paths(tree)[k]) or "(the top level)"


def _require_same_shape(env, have: TensorType, want: TensorType, what: str,
                        other: str = "the carry", why: str = "a loop carry keeps its shape") -> None:
    if have.ndim != want.ndim:
        raise ShapeError(f"{what} has type {have} where {other} has {want} ({why})")
    for ax, (h, w) in enumerate(zip(have.shape, want.shape)):
        env.require_eq(h, w, f"{what} axis {ax}: {dim_str(h)} where {other} has {dim_str(w)} "
                             f"({why})")


def _widen(have: TensorType, want: TensorType, what: str) -> TensorType:
    """The carry type after a body returned ``have`` for a carry of type ``want``: a weak
    carry (a Python scalar) takes the body's dtype; a dtype that casts safely widens (NumPy's
    rebinding ``acc = acc + x`` promotes); anything else is a TypeError."""
    if have.dtype == want.dtype:
        return TensorType(want.shape, want.dtype, want.weak and have.weak)
    if want.weak:
        return TensorType(want.shape, have.dtype, have.weak)
    if have.weak and np.can_cast(have.dtype, want.dtype, "same_kind"):
        return want
    if np.can_cast(want.dtype, have.dtype, "safe"):
        return TensorType(want.shape, have.dtype, False)
    raise TypeError(f"{what} has dtype {have.dtype} where the carry has {want.dtype}, which does "
                    f"not cast to it safely; convert the initial value (x.astype(...))")


def _loop_region(fun, prefix_types: list, carry_types: list, carry_tree, name: str, what: str,
                 split: Callable = lambda outs: (outs, [])) -> tuple:
    """Trace a loop body until its carry types are a fixpoint.  ``fun`` takes the prefix
    (the loop index) then the carry; ``split`` separates its results into carry and the rest
    (scan's stacked outputs).  Returns (region, carry types)."""
    env = current_trace().env
    for _ in range(4):
        tree = optree.tree_structure((tuple(range(len(prefix_types))),
                                      optree.tree_unflatten(carry_tree, list(range(len(carry_types))))),
                                     none_is_leaf=False)
        region = _trace_region(lambda pre, carry: fun(*pre, carry), prefix_types + carry_types, tree,
                               name, what)
        carry_out, carry_out_tree = split(region)
        if carry_out_tree != carry_tree:
            raise TypeError(f"{what} returned a carry of structure {carry_out_tree}, where the "
                            f"initial value has {carry_tree}")
        new = []
        for k, (have, want) in enumerate(zip(carry_out, carry_types)):
            w = f"{what}'s carry {_path(carry_tree, k)}"
            _require_same_shape(env, have, want, w)
            new.append(_widen(have, want, w))
        if new == carry_types:
            if [t.dtype for t in carry_out] != [t.dtype for t in carry_types]:
                # same carry types but a weak result of another dtype: convert in the body
                region = _trace_region(lambda pre, carry: fun(*pre, carry), prefix_types + carry_types,
                                       tree, name, what, out_types=carry_types + region.out_types[len(carry_types):])
            return region, carry_types
        carry_types = new
    raise TypeError(f"{what}: the carry's dtypes do not settle ({carry_types})")


def _operand(ctx: TraceContext, x, t: TensorType):
    """An initial carry value as a traced operand of type ``t`` (converted if widened)."""
    have = _type_of(ctx, x)
    if have.dtype != t.dtype or have.weak != t.weak:
        return convert.bind(x if isinstance(x, Tracer) else ctx_value(ctx, x), dtype=t.dtype, weak=t.weak)
    return x


def ctx_value(ctx: TraceContext, x):
    """A constant as a traced value (so ``convert`` records a binding)."""
    a = ctx.atom(x)
    return Tracer(ctx, a)


def _leaves(tree_value) -> tuple[list, Any]:
    return optree.tree_flatten(tree_value, none_is_leaf=False)


def _traced(*values) -> TraceContext | None:
    """The trace control flow records into: an active trace (under jit every array is
    traced, constants too) or one a traced operand belongs to."""
    leaves = []
    for v in values:
        leaves += _leaves(v)[0]
    return find_trace(leaves) or current_trace()


def _index_scalar(ctx, x, what: str):
    """A loop bound or branch index: an int, a dim, or a traced integer scalar."""
    if isinstance(x, (bool, np.bool_)):
        x = int(x)
    if isinstance(x, (int, np.integer, SymbolicDim)):
        return x
    if isinstance(x, Tracer):
        if x.ndim != 0 or not dt.is_int(x.dtype) and not dt.is_bool(x.dtype):
            raise TypeError(f"{what} must be an integer scalar, got {x.type}")
        return x
    a = np.asarray(x)
    if a.ndim != 0 or a.dtype.kind not in "iub":
        raise TypeError(f"{what} must be an integer scalar, got {a.dtype}{list(a.shape)}")
    return int(a)


# ---------------------------------------------------------------------------------------
# fori_loop and while_loop
# ---------------------------------------------------------------------------------------

def fori_loop(lower, upper, body_fun: Callable, init_val, *, unroll: Any = None):
    """``for i in range(lower, upper): val = body_fun(i, val)``; returns ``val``.

    ``lower``/``upper`` may be ints, symbolic dims (``x.shape[0]``) or traced integer
    scalars; ``init_val`` any pytree of arrays and scalars, whose shapes the body keeps.
    ``unroll`` is accepted for JAX compatibility and ignored."""
    ctx = _traced(lower, upper, init_val)
    if ctx is None:
        val = init_val
        for i in range(int(lower), int(upper)):
            val = body_fun(i, val)
        return val
    lo = _index_scalar(ctx, lower, "fori_loop's lower bound")
    hi = _index_scalar(ctx, upper, "fori_loop's upper bound")
    lo_t, hi_t = ctx.atom(lo).type, ctx.atom(hi).type
    if lo_t.weak and hi_t.weak:
        itype = TensorType((), np.dtype("int64"), True)
    else:
        strong = [t.dtype for t in (lo_t, hi_t) if not t.weak]
        itype = TensorType((), np.result_type(*strong), False)
    leaves, tree = _leaves(init_val)
    types = [_type_of(ctx, x) for x in leaves]
    region, types = _loop_region(lambda i, carry: body_fun(i, carry), [itype], types, tree,
                                 "fori_body", "fori_loop's body",
                                 split=lambda r: (r.out_types, r.out_tree))
    outs = fori_loop_p.bind(lo, hi, *[_operand(ctx, x, t) for x, t in zip(leaves, types)],
                            *region.captured, body=region.module, n_carry=len(types))
    return optree.tree_unflatten(tree, outs)


def while_loop(cond_fun: Callable, body_fun: Callable, init_val):
    """``while cond_fun(val): val = body_fun(val)``; returns ``val``.  ``cond_fun`` returns a
    boolean scalar."""
    ctx = _traced(init_val)
    if ctx is None:
        val = init_val
        while bool(cond_fun(val)):
            val = body_fun(val)
        return val
    leaves, tree = _leaves(init_val)
    types = [_type_of(ctx, x) for x in leaves]
    body, types = _loop_region(lambda carry: body_fun(carry), [], types, tree, "while_body",
                               "while_loop's body", split=lambda r: (r.out_types, r.out_tree))
    cond = _trace_region(cond_fun, types, optree.tree_structure((init_val,), none_is_leaf=False),
                         "while_cond", "while_loop's cond")
    if len(cond.out_types) != 1 or cond.out_types[0].ndim != 0 or \
            not (dt.is_bool(cond.out_types[0].dtype) or dt.is_int(cond.out_types[0].dtype)):
        raise TypeError(f"while_loop's cond must return a boolean scalar, got "
                        f"{', '.join(str(t) for t in cond.out_types) or 'nothing'}")
    outs = while_loop_p.bind(*[_operand(ctx, x, t) for x, t in zip(leaves, types)],
                             *cond.captured, *body.captured, cond=cond.module, body=body.module,
                             n_carry=len(types), n_cond_consts=len(cond.captured))
    return optree.tree_unflatten(tree, outs)


# ---------------------------------------------------------------------------------------
# Derivatives: a region called again on tracers, and the loops' vjp rules
# ---------------------------------------------------------------------------------------

def call_region(module: IRModule, args: Sequence) -> list:
    """The results of region ``module`` on ``args`` (tracers of the running trace, one per
    parameter): its bindings bound again, in order, in the running trace."""
    fn = module.main
    ctx = current_trace()
    env = dict(zip(fn.params, args))

    def value(a):
        return env[a] if a in env else Tracer(ctx, a)     # a parameter or binding, or a Literal
    for b in fn.bindings:
        if b.kind != "primitive":
            raise NotImplementedError(f"a region holding {b.kind} {b.callee.name} cannot be "
                                      f"called again")
        outs = b.callee.bind(*[value(a) for a in b.args], **b.params)
        env.update(zip(b.outvars, outs if b.callee.multiple_results else [outs]))
    return [value(r) for r in fn.results]


def _fori_vjp(cts, lower, upper, *rest, outs, pullback, body, n_carry):
    """fori_loop's reverse mode, storing every carry: the loop runs again as a scan that
    stacks the index and the carry each step starts from, then the steps' pullbacks run
    backwards (``_carries_back``).  With traced bounds (which JAX does not differentiate)
    the stacked carries' length is a run-time dim, as for a while_loop."""
    carry, captured = list(rest[:n_carry]), list(rest[n_carry:])

    def run(i, c, cap):
        return call_region(body, [i, *c, *cap])
    if not all(isinstance(b.atom, Literal) for b in (lower, upper)):
        # a trip count known at run time: the indices an array of that many (a run-time
        # dim), scanned over as a while_loop's steps are
        itype = body.main.params[0].type.dtype
        lo, hi = (convert.bind(b, dtype=itype, weak=False) for b in (lower, upper))
        trips = _max.bind(sub.bind(hi, lo), np.zeros((), itype))
        index = add.bind(convert.bind(iota_count(trips), dtype=itype, weak=False), lo)
        _, stacked = scan(lambda c, i: (tuple(run(i, c, captured)), c), tuple(carry), index)
        g_c, g_cap = _carries_back(pullback, run, cts, outs, carry, captured, stacked, index)
        return [None, None, *g_c, *g_cap]
    lo, hi = lower.atom.value, upper.atom.value
    length = hi - lo if is_symbolic(hi - lo) else max(int(hi - lo), 0)

    def step(state, _):
        i, c = state
        return (add.bind(i, np.ones((), lower.dtype)), tuple(run(i, c, captured))), (i, c)
    _, (index, stacked) = scan(step, (lower, tuple(carry)), None, length=length)
    g_c, g_cap = _carries_back(pullback, run, cts, outs, carry, captured, stacked, index)
    return [None, None, *g_c, *g_cap]


def _carries_back(pullback, run, cts, outs, carry: list, captured: list, stacked, extras):
    """The cotangents of a loop's initial carry and of the values its body captured (None
    where not a float), from every step's starting carry ``stacked`` and ``extras`` (a
    per-step array: the loop index): a scan backwards over the steps, each taking the carry's
    cotangent through the pullback of ``run(extra, carry, captured)`` (the next carry) and
    summing the captured values' cotangents.  (``pullback(fun, primals, cts)``: the
    primals' cotangents.)"""
    fc, fcap = _floats(carry), _floats(captured)

    def back(state, step):
        ct_c, ct_cap = state
        extra, c_t = step

        def one_step(*floats):
            new = run(extra, _with(c_t, fc, floats[:len(fc)]), _with(captured, fcap, floats[len(fc):]))
            return [new[k] for k in fc]
        got = pullback(one_step, [c_t[k] for k in fc] + [captured[k] for k in fcap], list(ct_c))
        return (tuple(got[:len(fc)]), tuple(add.bind(s, g) for s, g in zip(ct_cap, got[len(fc):]))), None
    ct_c = tuple(cts[k] if cts[k] is not None else zeros_like(outs[k]) for k in fc)
    ct_cap = tuple(zeros_like(captured[k]) for k in fcap)
    (g_c, g_cap), _ = scan(back, (ct_c, ct_cap), (extras, stacked), reverse=True)
    return _with([None] * len(carry), fc, g_c), _with([None] * len(captured), fcap, g_cap)


def _floats(values: Sequence) -> list[int]:
    return [k for k, v in enumerate(values) if dt.is_float(v.dtype)]


def _with(values: Sequence, positions: list[int], new: Sequence) -> list:
    """``values`` with those at ``positions`` replaced by ``new`` (in order)."""
    out = list(values)
    for k, v in zip(positions, new):
        out[k] = v
    return out


def _scan_vjp(cts, *ins, outs, pullback, body, n_carry, n_xs, length, reverse):
    """scan's reverse mode, storing every carry: the scan runs again stacking the carry each
    step starts from, then a scan in the other direction takes the cotangents of the carry
    and of that step's ``y`` back through the body, giving the step's ``xs`` cotangents
    (stacked) and summing those of the values the body captured."""
    carry, xs, captured = list(ins[:n_carry]), list(ins[n_carry:n_carry + n_xs]), list(ins[n_carry + n_xs:])
    ys = outs[n_carry:]
    fc, fx, fcap, fy = _floats(carry), _floats(xs), _floats(captured), _floats(ys)
    a, b = len(fc), len(fc) + len(fx)          # the carry's, the xs' and the captured floats

    def step(c, x_t):                     # (x_t is None where the scan has no xs)
        return tuple(call_region(body, [*(x_t or ()), *c, *captured])[:n_carry]), c
    _, stacked = scan(step, tuple(carry), tuple(xs), length=length, reverse=reverse)

    def back(state, inp):
        ct_c, ct_cap = state
        c_t, x_t, ct_y = inp

        def one_step(*floats):
            res = call_region(body, [*_with(x_t, fx, floats[a:b]), *_with(c_t, fc, floats[:a]),
                                     *_with(captured, fcap, floats[b:])])
            return [res[k] for k in fc] + [res[n_carry + j] for j in fy]
        got = pullback(one_step, [c_t[k] for k in fc] + [x_t[k] for k in fx] + [captured[k] for k in fcap],
                       list(ct_c) + list(ct_y))
        return (tuple(got[:a]), tuple(add.bind(s, g) for s, g in zip(ct_cap, got[b:]))), tuple(got[a:b])
    ct_c = tuple(cts[k] if cts[k] is not None else zeros_like(outs[k]) for k in fc)
    ct_y = tuple(cts[n_carry + j] if cts[n_carry + j] is not None else zeros_like(ys[j]) for j in fy)
    ct_cap = tuple(zeros_like(captured[k]) for k in fcap)
    (g_c, g_cap), g_x = scan(back, (ct_c, ct_cap), (stacked, tuple(xs), ct_y), length=length,
                             reverse=not reverse)
    return [*_with([None] * n_carry, fc, g_c), *_with([None] * n_xs, fx, g_x),
            *_with([None] * len(captured), fcap, g_cap)]


def _while_vjp(cts, *ins, outs, pullback, cond, body, n_carry, n_cond_consts):
    """while_loop's reverse mode (JAX has none): the loop runs again counting its trip count
    ``N``, an array of ``N`` indices gives the stacked carries a run-time length, and the
    steps' pullbacks run backwards as a fori_loop's do (``_carries_back``)."""
    carry = list(ins[:n_carry])
    consts, captured = list(ins[n_carry:n_carry + n_cond_consts]), list(ins[n_carry + n_cond_consts:])

    def run(_, c, cap):
        return call_region(body, [*c, *cap])
    one = np.ones((), np.int64)
    _, trips = while_loop(lambda s: call_region(cond, [*s[0], *consts])[0],
                          lambda s: (tuple(run(None, s[0], captured)), add.bind(s[1], one)),
                          (tuple(carry), np.zeros((), np.int64)))
    steps = iota_count(trips)
    _, stacked = scan(lambda c, _: (tuple(run(None, c, captured)), c), tuple(carry), steps)
    g_c, g_cap = _carries_back(pullback, run, cts, outs, carry, captured, stacked, steps)
    return [*g_c, *([None] * n_cond_consts), *g_cap]


# the loops' rules take every output's cotangent at once (``cts``)
fori_loop_p.vjp, fori_loop_p.vjp_all_outputs = _fori_vjp, True
scan_p.vjp, scan_p.vjp_all_outputs = _scan_vjp, True
while_loop_p.vjp, while_loop_p.vjp_all_outputs = _while_vjp, True


# ---------------------------------------------------------------------------------------
# scan and map
# ---------------------------------------------------------------------------------------

def scan(f: Callable, init, xs=None, length=None, reverse: bool = False, unroll: Any = 1):
    """JAX's scan: ``carry, y = f(carry, x)`` for each ``x`` along the leading axis of ``xs``
    (a pytree, or None with ``length``); returns ``(carry, ys)`` with the ``y`` stacked.
    ``reverse`` runs from the end (``ys`` keeps the order of ``xs``)."""
    ctx = _traced(init, xs, length)
    x_leaves, x_tree = _leaves(xs)
    if ctx is None:
        return _scan_eager(f, init, xs, x_leaves, x_tree, length, reverse)
    env = ctx.env
    n = length
    for k, x in enumerate(x_leaves):
        t = _type_of(ctx, x)
        if t.ndim == 0:
            raise ShapeError(f"scan: xs {_path(x_tree, k)} is a scalar; every xs leaf needs a "
                             f"leading axis to scan over")
        d = t.shape[0]
        if n is None:
            n = d
        else:
            n = n.expr if isinstance(n, SymbolicDim) else n
            env.require_eq(d, n, f"scan: xs {_path(x_tree, k)} has leading axis {dim_str(d)}, "
                                 f"expected the length {dim_str(n)}")
    if n is None:
        raise ValueError("scan needs xs or length=")
    n = n.expr if isinstance(n, SymbolicDim) else n
    if isinstance(n, Tracer):
        raise TypeError("scan's length must be an int or a dim (its outputs are stacked along it); "
                        "use fori_loop or while_loop for a traced trip count")
    n = int(n) if not is_symbolic(n) else n
    x_types = [TensorType(_type_of(ctx, x).shape[1:], _type_of(ctx, x).dtype) for x in x_leaves]
    c_leaves, c_tree = _leaves(init)
    c_types = [_type_of(ctx, x) for x in c_leaves]

    def split(region):
        outs = region.out_tree
        if outs.num_children != 2 or outs.kind not in (optree.PyTreeKind.TUPLE, optree.PyTreeKind.LIST):
            raise TypeError(f"scan's f must return a pair (carry, y), got the structure {outs}")
        carry_tree = optree.treespec_children(outs)[0]
        return region.out_types[:carry_tree.num_leaves], carry_tree

    region, c_types = _loop_region(
        lambda *a: f(a[-1], optree.tree_unflatten(x_tree, list(a[:-1])) if x_leaves else None),
        x_types, c_types, c_tree, "scan_body", "scan's f", split=split)
    y_tree = optree.treespec_children(region.out_tree)[1]
    outs = scan_p.bind(*[_operand(ctx, x, t) for x, t in zip(c_leaves, c_types)], *x_leaves,
                       *region.captured, body=region.module, n_carry=len(c_types),
                       n_xs=len(x_leaves), length=n, reverse=bool(reverse))
    nc = len(c_types)
    return optree.tree_unflatten(c_tree, outs[:nc]), optree.tree_unflatten(y_tree, outs[nc:])


def _scan_eager(f, init, xs, x_leaves, x_tree, length, reverse):
    n = length if length is not None else (len(x_leaves[0]) if x_leaves else None)
    if n is None:
        raise ValueError("scan needs xs or length=")
    n = int(n)
    for k, x in enumerate(x_leaves):
        if np.shape(x)[:1] != (n,):
            raise ShapeError(f"scan: xs {_path(x_tree, k)} has leading axis "
                             f"{np.shape(x)[:1]}, expected the length {n}")
    carry, ys = init, []
    order = range(n - 1, -1, -1) if reverse else range(n)
    for t in order:
        x = optree.tree_unflatten(x_tree, [np.asarray(v)[t] for v in x_leaves]) if x_leaves else None
        carry, y = f(carry, x)
        ys.append(y)
    if reverse:
        ys.reverse()
    if not ys:
        x0 = optree.tree_unflatten(x_tree, [np.zeros(np.shape(v)[1:], np.asarray(v).dtype)
                                            for v in x_leaves]) if x_leaves else None
        _, y = f(carry, x0)              # for the shapes of the (empty) stacked outputs
        return carry, optree.tree_map(lambda v: np.zeros((0,) + np.shape(v), np.asarray(v).dtype), y)
    stacked = optree.tree_map(lambda *v: np.stack([np.asarray(a) for a in v]), *ys)
    return carry, stacked


def map(f: Callable, xs):
    """``stack([f(x) for x in xs])`` over the leading axis of the pytree ``xs`` (JAX's
    ``lax.map``), as a scan without a carry."""
    return scan(lambda c, x: (c, f(x)), None, xs)[1]


# ---------------------------------------------------------------------------------------
# cond and switch
# ---------------------------------------------------------------------------------------

def switch(index, branches: Sequence[Callable], *operands, names: Sequence[str] | None = None):
    """``branches[clamp(index, 0, len - 1)](*operands)``: only the chosen branch runs.  Every
    branch returns the same structure of the same shapes; dtypes that differ are promoted
    as NumPy would (weak Python scalars take the other branches' dtype)."""
    branches = list(branches)
    if not branches:
        raise ValueError("switch needs at least one branch")
    ctx = _traced(index, operands)
    if ctx is None or not isinstance(index, Tracer):
        i = int(np.asarray(index)) if not isinstance(index, SymbolicDim) else \
            (ctx.env.concrete(index.expr, "switch's index") if ctx else int(index.expr))
        return branches[min(max(i, 0), len(branches) - 1)](*operands)
    idx = _index_scalar(ctx, index, "switch's index")
    if dt.is_bool(idx.dtype):
        idx = convert.bind(idx, dtype=np.dtype("int32"), weak=False)
    leaves, tree = _leaves(operands)
    types = [_type_of(ctx, x) for x in leaves]
    names = names or [f"branch {k}" for k in range(len(branches))]
    traced = [_trace_region(lambda *ops, b=b: b(*ops), types, tree, f"branch{k}",
                            names[k]) for k, b in enumerate(branches)]
    out_tree = traced[0].out_tree
    for k, r in enumerate(traced[1:], 1):
        if r.out_tree != out_tree:
            raise TypeError(f"the branches return different structures: {names[0]} {out_tree}, "
                            f"{names[k]} {r.out_tree}")
    target = []
    for j in range(len(traced[0].out_types)):
        ts = [r.out_types[j] for r in traced]
        for k, t in enumerate(ts[1:], 1):
            _require_same_shape(ctx.env, t, ts[0], f"{names[k]}'s result {_path(out_tree, j)}",
                                f"{names[0]}'s", "every branch returns the same shapes")
        strong = [t.dtype for t in ts if not t.weak]
        dtype = np.result_type(*strong) if strong else np.result_type(*[t.dtype for t in ts])
        target.append(TensorType(ts[0].shape, dtype, not strong))
    if any([t.dtype for t in r.out_types] != [t.dtype for t in target] for r in traced):
        traced = [_trace_region(lambda *ops, b=b: b(*ops), types, tree, f"branch{k}", names[k],
                                out_types=target) for k, b in enumerate(branches)]
    caps, spans = [], []
    for r in traced:
        spans.append((len(caps), len(caps) + len(r.captured)))
        caps += r.captured
    outs = cond_p.bind(idx, *leaves, *caps, branches=tuple(r.module for r in traced),
                       n_operands=len(leaves), capture_spans=tuple(spans))
    return optree.tree_unflatten(out_tree, outs)


def _cond_vjp(cts, index, *rest, outs, pullback, branches, n_operands, capture_spans):
    """cond's reverse mode: the same branch, chosen by the same index, runs its pullback
    (a switch over the branches' pullbacks), giving the operands' cotangents and those of
    the values it captured (zeros for the other branches' captures)."""
    ops, caps = list(rest[:n_operands]), list(rest[n_operands:])
    fo, fcap, fy = _floats(ops), _floats(caps), _floats(outs)
    ct_y = [cts[j] if cts[j] is not None else zeros_like(outs[j]) for j in fy]

    def pullback_of(k: int):
        lo, hi = capture_spans[k]
        mine = [c for c in fcap if lo <= c < hi]

        def run():
            def branch(*floats):
                cap = _with(caps, mine, floats[len(fo):])
                res = call_region(branches[k], [*_with(ops, fo, floats[:len(fo)]), *cap[lo:hi]])
                return [res[j] for j in fy]
            got = pullback(branch, [ops[j] for j in fo] + [caps[c] for c in mine], ct_y)
            by_cap = dict(zip(mine, got[len(fo):]))
            return tuple(got[:len(fo)]) + tuple(by_cap[c] if c in by_cap else zeros_like(caps[c]) for c in fcap)
        return run
    got = switch(index, [pullback_of(k) for k in range(len(branches))])
    return [None, *_with([None] * len(ops), fo, got[:len(fo)]), *_with([None] * len(caps), fcap, got[len(fo):])]


cond_p.vjp, cond_p.vjp_all_outputs = _cond_vjp, True


def cond(pred, true_fun: Callable, false_fun: Callable, *operands):
    """``true_fun(*operands) if pred else false_fun(*operands)``, with only the taken branch
    running (JAX's ``lax.cond``)."""
    if isinstance(pred, Tracer):
        if pred.ndim != 0:
            raise TypeError(f"cond's predicate must be a scalar, got {pred.type}")
        if not dt.is_bool(pred.dtype):
            pred = ne.bind(pred, np.zeros((), pred.dtype))
        return switch(pred, [false_fun, true_fun], *operands, names=["the false branch", "the true branch"])
    return (true_fun if bool(pred) else false_fun)(*operands)
