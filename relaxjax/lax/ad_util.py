"""What the primitives' reverse-mode rules (``Primitive.vjp``) share: constants in the
running trace, and summing a cotangent back to the shape of an operand that was broadcast.

A rule is ``vjp(ct, *operands, out=result, **params)``: ``ct`` is the cotangent of the
result (the tracer of a value of its shape and dtype), the operands and the result are the
forward values (tracers); it returns one cotangent per operand, None for an operand that
takes none (an index, a predicate).  Primitives are looked up by name when a rule runs (the
modules defining them import this one)."""
from __future__ import annotations

import numpy as np

from ..core import Tracer, current_trace
from ..ir import Literal, TensorType
from .complex_parts import scalar
from .util import bind  # noqa: F401  (the rules call it as ``au.bind``)


def const(x: Tracer, value: float) -> Tracer:
    """A 0-d constant of ``x``'s dtype."""
    return scalar(value, x.dtype)


def dim_scalar(d, dtype) -> Tracer:
    """Dim ``d`` (an int or a symbolic expression) as a 0-d value of integer ``dtype``."""
    ctx = current_trace()
    lit = Literal(ctx.env.canon(d) if not isinstance(d, int) else d, TensorType((), np.dtype("int64"), True))
    return bind("convert", Tracer(ctx, lit), dtype=np.dtype(dtype), weak=False)


def inverse_permutation(perm) -> tuple:
    """The axis permutation that undoes ``perm`` (a transpose's cotangent goes back by it)."""
    inv = [0] * len(perm)
    for k, p in enumerate(perm):
        inv[p] = k
    return tuple(inv)


def zeros_like(x: Tracer) -> Tracer:
    return bind("broadcast_to", const(x, 0), shape=tuple(x.type.shape))


def same_dim(a, b) -> bool:
    """Two dims provably equal in the running trace (under its guards: ``n == m``)."""
    if a is b or a == b:
        return True
    env = current_trace().env
    return env.try_prove("==", env.canon(a), env.canon(b)) is True


def same_shape(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(same_dim(x, y) for x, y in zip(a, b))


def unbroadcast(ct: Tracer, operand: Tracer) -> Tracer:
    """``ct`` (of the broadcast result's shape) summed over the axes ``operand`` was
    broadcast along, in ``operand``'s shape: leading axes it lacks, and axes where its dim
    is 1 and the result's not (provably) -- broadcasting only stretches a 1, so a dim that
    is not 1 equals the result's (``min(2, n)`` against 2 under the guard that they are
    equal, which the prover may not see)."""
    cs, os_ = tuple(ct.type.shape), tuple(operand.type.shape)
    lead = len(cs) - len(os_)
    axes = list(range(lead)) + [lead + k for k, d in enumerate(os_)
                                if same_dim(d, 1) and not same_dim(d, cs[lead + k])]
    if axes:
        ct = bind("reduce_sum", ct, axes=tuple(axes))
    if not same_shape(tuple(ct.type.shape), os_):
        ct = bind("reshape", ct, new_sizes=os_)
    return ct


def expand(ct: Tracer, axes: tuple, shape: tuple) -> Tracer:
    """A reduction's cotangent (axes ``axes`` of ``shape`` reduced away) broadcast back to
    ``shape``."""
    kept = [1 if k in axes else d for k, d in enumerate(shape)]
    return bind("broadcast_to", bind("reshape", ct, new_sizes=tuple(kept)), shape=tuple(shape))
