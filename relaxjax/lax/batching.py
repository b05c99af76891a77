"""Batching rules (``vmap``): the shared forms each primitive's rule takes.

A rule is ``rule(args, batched, **params) -> result(s)``: ``args`` are tracers, those with
``batched[k]`` set carrying the batch as their leading axis (the others are the same for
every example); it returns the primitive's result(s) for the whole batch, each with the batch
leading.  A primitive sets its rule as ``prim.batch = ...`` next to its other rules; one
without runs once per example in a loop (``relaxjax.vmap``), which is correct for every
primitive but not vectorized.  A rule may return None to ask for that loop too (a case it
does not cover, such as a batched padding value).
"""
from __future__ import annotations

from ..core import Tracer
from .util import bind


def batch_size(args, batched):
    """The batch's size: the leading dim of the batched arguments (vmap equated them)."""
    return next(a.type.shape[0] for a, b in zip(args, batched) if b)


def lift(x: Tracer, rank: int) -> Tracer:
    """A batched ``x`` with ones inserted after the batch axis up to ``rank`` dims per
    example, so that NumPy broadcasting lines its dims up with the other operands' (whose
    trailing dims align with the example's, not the batch's)."""
    per = x.ndim - 1
    if per >= rank:
        return x
    return bind("reshape", x, new_sizes=(x.type.shape[0],) + (1,) * (rank - per) + tuple(x.type.shape[1:]))


def materialize(x: Tracer, batched: bool, size) -> Tracer:
    """``x`` with the batch leading: broadcast along a new leading axis when unbatched."""
    if batched:
        return x
    return bind("broadcast_to", x, shape=(size,) + tuple(x.type.shape))


def broadcasting(prim):
    """Operands broadcast as NumPy does (elementwise ops, select, matmul's batch dims): the
    batched operands lifted to the largest rank per example, the others left as they are."""
    def rule(args, batched, **params):
        rank = max(a.ndim - b for a, b in zip(args, batched))
        return prim.bind(*[lift(a, rank) if b else a for a, b in zip(args, batched)], **params)
    return rule


def trailing(prim):
    """Ops that act on the last axis (or axes) alone (sort, argsort): the batch is one more
    leading axis."""
    def rule(args, batched, **params):
        return prim.bind(*args, **params)
    return rule


def shift_axes(prim, name: str):
    """Ops with an axis parameter (``axis`` or a tuple ``axes``) of the one operand: the
    axes move one up, past the batch."""
    def rule(args, batched, **params):
        p = dict(params)
        up = lambda a: a + 1 if a >= 0 else a          # a negative axis counts from the end
        p[name] = tuple(up(a) for a in p[name]) if isinstance(p[name], (tuple, list)) else up(p[name])
        return prim.bind(*args, **p)
    return rule
