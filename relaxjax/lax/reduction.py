"""Reductions over a set of axes (the numpy layer handles keepdims, dtypes and composites)."""
from __future__ import annotations

import numpy as np

from ..core import Primitive, Tracer
from . import ad_util as au
from . import batching
from .complex_parts import by_parts, packable
from .control_flow import scan
from ..errors import ShapeError
from ..shapes import dim_str, prod


def _reduce_shape(env, x, *, axes):
    return tuple(d for i, d in enumerate(x.shape) if i not in axes)


def _empty(env, d) -> bool:
    """Whether an axis without an identity to reduce to is empty: proved, or in automatic
    mode guarded (a dim first seen empty is a symbol that may be 0)."""
    r = env.try_prove("==", d, 0)
    if r is None and env.can_guard(d, 0):
        return env.decide("==", d, 0, "an empty reduction axis")
    return bool(r)


def reduction(name: str, np_fn, *, identity: bool = True, out_dtype=None,
              complex_rule=None) -> Primitive:
    """``identity=False``: the reduction has no identity (max/min), so empty axes are an error."""
    def shape_rule(env, x, *, axes):
        if not identity:
            for a in axes:
                if _empty(env, x.shape[a]):
                    raise ShapeError(f"{name}: zero-size axis {a} has no identity")
        return _reduce_shape(env, x, axes=axes)

    def dtype_rule(x, *, axes):
        return np.dtype(out_dtype) if out_dtype else x.dtype

    def impl(x, *, axes):
        return np.asarray(np_fn(x, axis=axes), dtype=out_dtype or x.dtype)

    return Primitive(name, shape_rule=shape_rule, dtype_rule=dtype_rule, impl=impl, kind="reduction",
                     complex_rule=complex_rule)


reduce_sum = reduction("reduce_sum", np.sum,
                       complex_rule=packable("reduce_sum", lambda axes: dict(axes=tuple(axes))))
reduce_prod = reduction("reduce_prod", np.prod)
reduce_max = reduction("reduce_max", np.max, identity=False)
reduce_min = reduction("reduce_min", np.min, identity=False)
reduce_and = reduction("reduce_and", np.all, out_dtype=bool)
reduce_or = reduction("reduce_or", np.any, out_dtype=bool)


def _arg_reduction(name, np_fn):
    def shape_rule(env, x, *, axis):
        if _empty(env, x.shape[axis]):
            raise ShapeError(f"{name}: attempt to get {name} of an empty axis ({dim_str(x.shape[axis])})")
        return _reduce_shape(env, x, axes=(axis,))
    return Primitive(name, shape_rule=shape_rule, dtype_rule=lambda x, *, axis: np.dtype("int64"),
                     impl=lambda x, *, axis: np.asarray(np_fn(x, axis=axis), dtype=np.int64),
                     kind="reduction")


argmax = _arg_reduction("argmax", np.argmax)
argmin = _arg_reduction("argmin", np.argmin)


def _cumulative(name: str, np_fn, complex_rule=None) -> Primitive:
    """A running reduction along ``axis`` (``cumsum``, ...): same shape and dtype.  FuseOps
    leaves it alone (``opaque``); Legalize gives it a scan loop."""
    def impl(x, *, axis):
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(np_fn(x, axis=axis), dtype=x.dtype)
    return Primitive(name, shape_rule=lambda env, x, *, axis: x.shape,
                     dtype_rule=lambda x, *, axis: x.dtype, impl=impl, kind="opaque",
                     complex_rule=complex_rule)


cumsum = _cumulative("cumsum", lambda x, axis: np.cumsum(x, axis=axis, dtype=x.dtype),
                     complex_rule=by_parts("cumsum"))
cumprod = _cumulative("cumprod", lambda x, axis: np.cumprod(x, axis=axis, dtype=x.dtype))
cummax = _cumulative("cummax", np.maximum.accumulate)
cummin = _cumulative("cummin", np.minimum.accumulate)


# ---------------------------------------------------------------------------------------
# Reverse-mode rules (``Primitive.vjp``, see ``ad_util``)
# ---------------------------------------------------------------------------------------

def _sum_vjp(ct, x, *, out, axes):
    return (au.expand(ct, tuple(axes), tuple(x.type.shape)),)


def _extremum_vjp(ct, x, *, out, axes):
    """max/min: the cotangent shared equally among the elements that attain the extremum
    (JAX's rule)."""
    axes, shape = tuple(axes), tuple(x.type.shape)
    hit = au.bind("convert", au.bind("eq", x, au.expand(out, axes, shape)), dtype=x.dtype)
    count = au.expand(reduce_sum.bind(hit, axes=axes), axes, shape)
    return (au.bind("div", au.bind("mul", au.expand(ct, axes, shape), hit), count),)


def _reversed(x: Tracer, axis: int) -> Tracer:
    """``x`` read backwards along ``axis`` (a slice of step -1)."""
    shape = tuple(x.type.shape)
    start = tuple(d - 1 if k == axis else 0 for k, d in enumerate(shape))
    step = tuple(-1 if k == axis else 1 for k in range(len(shape)))
    return au.bind("slice", x, start=start, size=shape, step=step)


def _suffix_sum(x: Tracer, axis: int) -> Tracer:
    """Along ``axis``, each element's sum with every later one."""
    return _reversed(cumsum.bind(_reversed(x, axis), axis=axis), axis)


def _shifted(x: Tracer, axis: int, fill: Tracer, later: bool) -> Tracer:
    """``x`` moved one step along ``axis``: element i holds ``x[i - 1]`` (``later``; ``fill``
    first) or ``x[i + 1]`` (``fill`` last)."""
    nd, shape = x.ndim, tuple(x.type.shape)
    one, zero = tuple(1 if k == axis else 0 for k in range(nd)), (0,) * nd
    padded = au.bind("pad", x, fill, low=one if later else zero, high=zero if later else one)
    return au.bind("slice", padded, start=zero if later else one, size=shape, step=(1,) * nd)


def _cumsum_vjp(ct, x, *, out, axis):
    """Each element feeds every later partial sum: the cotangents summed from the end."""
    return (_suffix_sum(ct, axis),)


def _exclusive_cumprod(x: Tracer, axis: int) -> Tracer:
    """Along ``axis``: 1, x0, x0 x1, ..., the product of every element before each."""
    return _shifted(cumprod.bind(x, axis=axis), axis, au.const(x, 1), later=True)


def _prod_vjp(ct, x, *, out, axes):
    """Each element's cotangent is the product of the others (zeros included, no division):
    the reduced axes moved last and merged, the products before and after each element
    from exclusive running products, forwards and backwards."""
    axes = tuple(sorted(axes))
    shape = tuple(x.type.shape)
    kept = [k for k in range(len(shape)) if k not in axes]
    perm = tuple(kept) + axes
    moved = au.bind("transpose", x, perm=perm) if perm != tuple(range(len(shape))) else x
    merged = tuple(shape[k] for k in kept) + (prod(shape[a] for a in axes),)
    flat = au.bind("reshape", moved, new_sizes=merged)
    last = len(kept)
    others = au.bind("mul", _exclusive_cumprod(flat, last),
                     _reversed(_exclusive_cumprod(_reversed(flat, last), last), last))
    g = au.bind("mul", others, au.bind("reshape", ct, new_sizes=tuple(ct.type.shape) + (1,)))
    g = au.bind("reshape", g, new_sizes=tuple(shape[k] for k in perm))
    if perm != tuple(range(len(shape))):
        g = au.bind("transpose", g, perm=au.inverse_permutation(perm))
    return (g,)


def _cumprod_vjp(ct, x, *, out, axis):
    """Element j feeds every product i >= j as ``E_j * prod(x[j+1..i])``, with ``E`` the
    exclusive running product: its cotangent is ``E_j * R_j``, where ``R_j = g_j + x_{j+1}
    R_{j+1}`` runs from the end.  That recurrence is a reverse ``scan`` along the axis (no
    division, so zeros in ``x`` are exact)."""
    nd = x.ndim
    perm = (axis,) + tuple(k for k in range(nd) if k != axis)
    moved = (lambda t: au.bind("transpose", t, perm=perm)) if axis != 0 else (lambda t: t)
    xs, gs = moved(x), moved(ct)
    nxt = _shifted(xs, 0, au.const(xs, 0), later=False)     # x_{j+1} beside g_j (0 after the last)

    def step(r, gx):
        g, xn = gx
        r = au.bind("add", g, au.bind("mul", xn, r))
        return r, r
    _, rs = scan(step, au.bind("broadcast_to", au.const(xs, 0), shape=tuple(xs.type.shape)[1:]), (gs, nxt),
                 reverse=True)
    g = au.bind("mul", _exclusive_cumprod(xs, 0), rs)
    return (au.bind("transpose", g, perm=au.inverse_permutation(perm)) if axis != 0 else g,)


def _running_extremum_vjp(ct, x, *, out, axis):
    """cummax/cummin: output i is the element where the running extremum was last reached
    (a *record*: ``x[j] == out[j]``; a tie goes to the later element), so a record takes
    the cotangents of its run, up to the next record: the suffix sums of the cotangent at
    the record less those at the next record (found by a running minimum from the end)."""
    shape = tuple(x.type.shape)
    n = shape[axis]
    record = au.bind("eq", x, out)
    idx = au.bind("iota", shape=shape, dimension=axis, dtype=np.dtype("int64"))
    end = au.bind("broadcast_to", au.dim_scalar(n, np.dtype("int64")), shape=shape)
    at = au.bind("select", record, idx, end)
    # the first record at or after each position, then after it (one step on)
    first = _reversed(cummin.bind(_reversed(at, axis), axis=axis), axis)
    after = _shifted(first, axis, au.dim_scalar(n, np.dtype("int64")), later=False)
    suffix = _suffix_sum(ct, axis)
    padded = au.bind("pad", suffix, au.const(suffix, 0), low=(0,) * len(shape),
                     high=tuple(1 if k == axis else 0 for k in range(len(shape))))
    later = au.bind("take_along_axis", padded, after, axis=axis)
    return (au.bind("select", record, au.bind("sub", suffix, later), au.const(suffix, 0)),)


reduce_sum.vjp = _sum_vjp
reduce_max.vjp = reduce_min.vjp = _extremum_vjp
reduce_prod.vjp = _prod_vjp
cumsum.vjp = _cumsum_vjp
cumprod.vjp = _cumprod_vjp
cummax.vjp = cummin.vjp = _running_extremum_vjp


# Batching rules (``vmap``, see ``batching``): the reduced axes move past the batch
for _prim in (reduce_sum, reduce_prod, reduce_max, reduce_min, reduce_and, reduce_or):
    _prim.batch = batching.shift_axes(_prim, "axes")
for _prim in (argmax, argmin, cumsum, cumprod, cummax, cummin):
    _prim.batch = batching.shift_axes(_prim, "axis")
del _prim
