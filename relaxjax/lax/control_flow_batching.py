"""Batching (``vmap``) of a binding, and the batching rules of the control-flow primitives.

:func:`batch_binding` is the one step ``vmap`` repeats: a binding emitted again for the whole
batch, by its primitive's rule (``Primitive.batch``, ``lax.batching``), a library function
that maps over stacks (``linalg``'s) called once on the batch's stack, or, without either,
once per example in a ``lax.map`` loop.  The loops and ``cond`` have rules here, as JAX's do: a region
(a body, a condition, a branch) is called again with its bindings batched
(:func:`batched_region`), so the loop runs once for the batch:

- ``fori_loop`` with the same bounds for every example and ``scan`` run their batched body
  (a scan's batched ``xs`` scanned along their second axis, its stacked ``ys`` moved back
  behind the batch);
- ``while_loop`` (and a ``fori_loop`` whose bounds differ per example) runs until every
  example's condition is false; each step updates only the examples still running (a
  ``select`` on the per-example condition), so every example ends with its own carry;
- ``cond``/``switch`` with one index for the batch runs the chosen branch batched; with an
  index per example every branch runs and each example takes its own branch's results.
"""
from __future__ import annotations

import numpy as np

from ..core import Tracer, current_trace
from ..ir import Binding, IRModule, TensorType, Var
from ..library import lookup
from . import control_flow as cf
from .batching import batch_size, materialize
from .util import bind

__all__ = ["batch_binding", "batched_region"]

# primitives whose result's size depends on each example's values: the examples' results
# could not be stacked into one array
RAGGED = {"nonzero", "boolean_mask", "iota_count", "match_cast"}


def batch_binding(b: Binding, operands: list, flags: list) -> list:
    """The results of binding ``b`` for the whole batch (``operands``: flagged ones batched,
    the batch leading), each batched."""
    if b.kind == "primitive":
        prim = b.callee
        if prim.name in RAGGED:
            raise NotImplementedError(
                f"vmap of {prim.name}: the size of its result depends on each example's values, "
                f"so the examples' results cannot be stacked into one array (JAX refuses it too); "
                f"use a fixed-size form (e.g. where() instead of a boolean mask)")
        rule = getattr(prim, "batch", None)
        got = rule(operands, flags, **b.params) if rule is not None else None
        if got is not None:
            return list(got) if prim.multiple_results else [got]
    elif b.kind == "library" and lookup(b.callee.name).stacked:
        return _stacked_call(b, operands, flags)
    return _per_example(b, operands, flags)


def _stacked_call(b: Binding, operands: list, flags: list) -> list:
    """A library function that maps over leading axes (``register_library(stacked=True)``)
    called once, the batch one more leading axis of every operand and result."""
    size = batch_size(operands, flags)
    args = [materialize(x, f, size) for x, f in zip(operands, flags)]
    return rebind(b, args, [TensorType((size,) + tuple(v.type.shape), v.type.dtype) for v in b.outvars])


def _per_example(b: Binding, operands: list, flags: list) -> list:
    """``b`` once per example, in a loop over the batch (``lax.map``)."""
    idx = [k for k, f in enumerate(flags) if f]

    def one(xs):
        args = list(operands)
        for k, x in zip(idx, xs):
            args[k] = x
        return rebind(b, args)
    return list(cf.map(one, [operands[k] for k in idx]))


def rebind(b: Binding, args: list, out_types: list | None = None) -> list:
    """Binding ``b`` emitted again on ``args`` (tracers of the same types) in the active
    trace; a call's results typed ``out_types`` where given (a library call on a stack)."""
    if b.kind == "primitive":
        got = b.callee.bind(*args, **b.params)
        return list(got) if b.callee.multiple_results else [got]
    ctx = current_trace()
    outvars = [Var(t) for t in out_types] if out_types is not None else [Var(v.type) for v in b.outvars]
    ctx.bindings.append(Binding(outvars, b.callee, [ctx.atom(a) for a in args], b.params, b.source))
    return [Tracer(ctx, v) for v in outvars]


def batched_region(module: IRModule, args: list, flags: list) -> tuple[list, list]:
    """Region ``module`` called on ``args`` (``flags``: batched, the batch leading) in the
    active trace, each binding batched where it reads a batched value: (results, which of
    them are batched)."""
    fn = module.main
    ctx = current_trace()
    env = {p: (a, f) for p, a, f in zip(fn.params, args, flags)}

    def value(a):
        return env[a] if a in env else (Tracer(ctx, a), False)    # a Literal
    for b in fn.bindings:
        ops, fl = zip(*[value(a) for a in b.args]) if b.args else ((), ())
        if any(fl):
            outs, batched = batch_binding(b, list(ops), list(fl)), True
        else:
            outs, batched = rebind(b, list(ops)), False
        env.update((v, (o, batched)) for v, o in zip(b.outvars, outs))
    res = [value(r) for r in fn.results]
    return [r for r, _ in res], [f for _, f in res]


def _all_batched(module: IRModule, args: list, flags: list, size) -> list:
    outs, batched = batched_region(module, args, flags)
    return [materialize(o, f, size) for o, f in zip(outs, batched)]


def _per_lane(mask: Tracer, rank: int) -> Tracer:
    """A bool per example reshaped to broadcast against a batched value of ``rank`` dims."""
    if rank == 1:
        return mask
    return bind("reshape", mask, new_sizes=(mask.type.shape[0],) + (1,) * (rank - 1))


def _masked_loop(size, state: list, live, step) -> list:
    """``while any(live(state)): state = where(live, step(state), state)`` per example:
    ``state`` batched values, ``live(state)`` a bool per example, ``step(state)`` the
    batched next state."""
    def cond_fun(s):
        return bind("reduce_or", live(list(s)), axes=(0,))

    def body_fun(s):
        s = list(s)
        running = live(s)
        return tuple(bind("select", _per_lane(running, new.ndim), new, old)
                     for new, old in zip(step(s), s))
    return list(cf.while_loop(cond_fun, body_fun, tuple(state)))


def _while_batch(args, flags, *, cond, body, n_carry, n_cond_consts):
    size = batch_size(args, flags)
    carry = [materialize(x, f, size) for x, f in zip(args[:n_carry], flags[:n_carry])]
    consts, const_flags = args[n_carry:n_carry + n_cond_consts], flags[n_carry:n_carry + n_cond_consts]
    caps, cap_flags = args[n_carry + n_cond_consts:], flags[n_carry + n_cond_consts:]

    def live(c):
        p = _all_batched(cond, [*c, *consts], [True] * n_carry + list(const_flags), size)[0]
        return p if p.dtype == np.dtype(bool) else bind("ne", p, np.zeros((), p.dtype))
    return _masked_loop(size, carry, live,
                        lambda c: _all_batched(body, [*c, *caps], [True] * n_carry + list(cap_flags), size))


def _fori_batch(args, flags, *, body, n_carry):
    size = batch_size(args, flags)
    (lo, hi), carry = args[:2], [materialize(x, f, size) for x, f in zip(args[2:2 + n_carry], flags[2:2 + n_carry])]
    caps, cap_flags = args[2 + n_carry:], list(flags[2 + n_carry:])
    if not (flags[0] or flags[1]):        # one trip count for the batch
        def step(i, c):
            return tuple(_all_batched(body, [i, *c, *caps], [False] + [True] * n_carry + cap_flags, size))
        return list(cf.fori_loop(lo, hi, step, tuple(carry)))
    # a trip count per example: the index is one more batched carry
    itype = body.main.params[0].type.dtype
    index = materialize(bind("convert", lo, dtype=itype, weak=False), flags[0], size)
    stop = materialize(bind("convert", hi, dtype=itype, weak=False), flags[1], size)

    def step(s):
        i, c = s[0], s[1:]
        new = _all_batched(body, [i, *c, *caps], [True] * (1 + n_carry) + cap_flags, size)
        return [bind("add", i, np.ones((), itype)), *new]
    return _masked_loop(size, [index, *carry], lambda s: bind("lt", s[0], stop), step)[1:]


def _swap_leading(x: Tracer) -> Tracer:
    """``x`` with its first two axes swapped (the batch and a scan's steps)."""
    return bind("transpose", x, perm=(1, 0) + tuple(range(2, x.ndim)))


def _scan_batch(args, flags, *, body, n_carry, n_xs, length, reverse):
    size = batch_size(args, flags)
    carry = [materialize(x, f, size) for x, f in zip(args[:n_carry], flags[:n_carry])]
    xs, x_flags = args[n_carry:n_carry + n_xs], list(flags[n_carry:n_carry + n_xs])
    caps, cap_flags = args[n_carry + n_xs:], list(flags[n_carry + n_xs:])
    # a batched xs is scanned along its steps, now its second axis
    xs = [_swap_leading(x) if f else x for x, f in zip(xs, x_flags)]

    def step(c, x_t):
        outs = _all_batched(body, [*(x_t or ()), *c, *caps], x_flags + [True] * n_carry + cap_flags, size)
        return tuple(outs[:n_carry]), tuple(outs[n_carry:])
    c, ys = cf.scan(step, tuple(carry), tuple(xs) if n_xs else None, length=length, reverse=reverse)
    return [*c, *(_swap_leading(y) for y in ys)]


def _cond_batch(args, flags, *, branches, n_operands, capture_spans):
    size = batch_size(args, flags)
    index, ops, op_flags = args[0], args[1:1 + n_operands], list(flags[1:1 + n_operands])
    caps, cap_flags = args[1 + n_operands:], list(flags[1 + n_operands:])

    def run(k):
        lo, hi = capture_spans[k]
        return _all_batched(branches[k], [*ops, *caps[lo:hi]], op_flags + cap_flags[lo:hi], size)
    if not flags[0]:                      # one branch for the whole batch
        return list(cf.switch(index, [lambda k=k: tuple(run(k)) for k in range(len(branches))]))
    # a branch per example: every branch runs; example t takes branch clamp(index[t])
    results = run(0)
    for k in range(1, len(branches)):
        take = bind("ge", index, np.full((), k, index.dtype))
        results = [bind("select", _per_lane(take, r.ndim), r, o) for r, o in zip(run(k), results)]
    return results


cf.while_loop_p.batch = _while_batch
cf.fori_loop_p.batch = _fori_batch
cf.scan_p.batch = _scan_batch
cf.cond_p.batch = _cond_batch
