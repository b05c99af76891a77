"""``vmap`` with JAX's names and semantics: a function of one example mapped over a batch.

An interpreter over the traced program (autodidax's design, as ``ad`` is): the function runs
once on tracers of one example's shape (the batched inputs' first examples), its bindings
are recorded as they are emitted, then each recorded binding that reads a batched value is
emitted again for the whole batch by its primitive's batching rule (``Primitive.batch``,
defined with the primitive in ``relaxjax.lax``; see ``lax.batching``).  A binding without a
rule (scatters, library calls) runs once per example inside a ``lax.map`` loop: correct for
every primitive, vectorized where a rule exists.  Loops and ``cond`` batch their regions
(``lax.control_flow_batching``): a batched ``while_loop`` runs until every example is done.  The one-example bindings
are left unused and removed with the rest of the dead code.

The batch size is whatever the batched axes say, a symbolic dim like any other: under
``jit`` (or called on NumPy arrays, which jit-compiles the mapped function once) one compiled
program serves every batch size.  ``vmap`` composes with ``grad`` either way round (per-
example gradients: ``vmap(grad(loss), in_axes=(None, 0))``) and with control flow.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import optree

from .core import Tracer, current_trace, find_trace
from .ir import Var
from .jit import traced_or_jitted
from .lax.util import bind as _bind
from .lax.control_flow_batching import batch_binding
from .numpy import moveaxis
from .shapes import dim_str

__all__ = ["vmap"]


def vmap(fun: Callable, in_axes: Any = 0, out_axes: Any = 0, axis_size: Any = None) -> Callable:
    """``fun`` mapped over an axis of its arguments, like ``jax.vmap``.

    ``in_axes``: an int (or None, not mapped) for every argument, or a tuple/list with one
    per positional argument (each an int or None, shared by the argument's leaves);
    ``out_axes``: likewise for the outputs (None: an output the same for every example);
    ``axis_size``: the batch size when no argument is mapped."""
    @functools.wraps(fun)
    def mapped(*args):
        return _vmap_traced(fun, args, in_axes, out_axes, axis_size)
    return traced_or_jitted(mapped)


def _per_argument(spec, n: int, what: str) -> list:
    if spec is None or isinstance(spec, int):
        return [spec] * n
    if isinstance(spec, (tuple, list)):
        if len(spec) != n:
            raise ValueError(f"vmap: {what} has {len(spec)} entries for {n} "
                             f"{'arguments' if what == 'in_axes' else 'outputs'}")
        for a in spec:
            if a is not None and not isinstance(a, int):
                raise TypeError(f"vmap: {what} entries are ints or None, got {a!r}")
        return list(spec)
    raise TypeError(f"vmap: {what} must be an int, None or a tuple of them, got {spec!r}")


def _vmap_traced(fun: Callable, args: tuple, in_axes, out_axes, axis_size):
    ctx = find_trace(list(args)) or current_trace()
    axes = _per_argument(in_axes, len(args), "in_axes")
    size, first = None, None
    batched_in, examples = [], []
    for k, (arg, axis) in enumerate(zip(args, axes)):
        leaves, tree = optree.tree_flatten(arg, none_is_leaf=False)
        ex_leaves = []
        for j, leaf in enumerate(leaves):
            t = leaf if isinstance(leaf, Tracer) and leaf.ctx is ctx else Tracer(ctx, ctx.atom(leaf))
            if axis is None:
                ex_leaves.append(t)
                continue
            where = f"argument {k}" + (f" leaf {j}" if len(leaves) > 1 else "")
            if not -t.ndim <= axis < max(t.ndim, 1) or t.ndim == 0:
                raise ValueError(f"vmap: in_axes {axis} for {where} of rank {t.ndim} is out of range")
            axis %= t.ndim
            t = moveaxis(t, axis, 0) if axis else t
            d = t.type.shape[0]
            if first is None:
                if axis_size is not None:
                    ctx.env.require_eq(d, getattr(axis_size, "expr", axis_size),
                                       f"vmap: {where} has size {dim_str(d)} on axis {axis}, "
                                       f"expected axis_size {dim_str(axis_size)}")
                size, first = d, (where, axis)
            else:
                ctx.env.require_eq(d, size, f"vmap: {where} has size {dim_str(d)} on axis {axis}, "
                                            f"expected the batch size {dim_str(size)} "
                                            f"({first[0]}'s axis {first[1]})")
            # one example: x[0] (zeros for an empty batch), its bindings removed as dead
            # once the batch replaces them
            rest = tuple(t.type.shape[1:])
            if ctx.env.try_prove("==", d, 0) is True:
                one = _bind("broadcast_to", _bind("convert", 0, dtype=t.dtype, weak=False), shape=rest)
            else:
                one = _bind("slice", t, start=(0,) * t.ndim, size=(1,) + rest, step=(1,) * t.ndim)
                one = _bind("reshape", one, new_sizes=rest)
            batched_in.append((one.atom, t))
            ex_leaves.append(one)
        examples.append(optree.tree_unflatten(tree, ex_leaves))
    if first is None:
        if axis_size is None:
            raise ValueError("vmap: no argument is mapped (every in_axes is None); give axis_size=")
        size = getattr(axis_size, "expr", axis_size)

    start = len(ctx.bindings)
    out = fun(*examples)
    recorded = ctx.bindings[start:]
    value = dict(batched_in)            # a one-example Var -> its batch (batch axis leading)
    for b in recorded:
        flags = [isinstance(a, Var) and a in value for a in b.args]
        if not any(flags):
            continue                    # the same for every example: kept as it is
        operands = [value[a] if f else Tracer(ctx, a) for a, f in zip(b.args, flags)]
        for v, y in zip(b.outvars, batch_binding(b, operands, flags)):
            value[v] = y
            if v in ctx.stopped:
                ctx.stopped.add(y.atom)

    leaves, tree = optree.tree_flatten(out, none_is_leaf=False)
    if isinstance(out_axes, (tuple, list)):     # one per top-level output
        if not isinstance(out, (tuple, list)) or len(out) != len(out_axes):
            raise ValueError(f"vmap: out_axes {out_axes!r} does not match the output's structure "
                             f"(one entry per element of the returned tuple)")
        outs = [a for a, o in zip(_per_argument(out_axes, len(out), "out_axes"), out)
                for _ in optree.tree_leaves(o, none_is_leaf=False)]
    else:
        outs = _per_argument(out_axes, len(leaves), "out_axes")
    results = []
    for k, (leaf, axis) in enumerate(zip(leaves, outs)):
        t = leaf if isinstance(leaf, Tracer) and leaf.ctx is ctx else Tracer(ctx, ctx.atom(leaf))
        y = value.get(t.atom) if isinstance(t.atom, Var) else None
        if axis is None:
            if y is not None:
                raise ValueError(f"vmap: out_axes is None for output {k}, which differs from "
                                 f"example to example")
            results.append(t)
            continue
        if y is None:                   # the same for every example: repeated
            y = _bind("broadcast_to", t, shape=(size,) + tuple(t.type.shape))
        if not -y.ndim <= axis < y.ndim:
            raise ValueError(f"vmap: out_axes {axis} for output {k} of rank {y.ndim - 1} is out of range")
        results.append(moveaxis(y, 0, axis) if axis % y.ndim else y)
    return optree.tree_unflatten(tree, results)
