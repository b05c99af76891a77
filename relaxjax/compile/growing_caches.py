"""Caches that grow along an inner axis, kept in arrays with room (Relax's growing KV cache).

A decode step written the Relax way concatenates its new key onto a donated cache and
returns the longer cache, ``cache = concatenate([cache, k], axis=1)`` with the cache
``(b, t, heads, hd)`` and ``t`` a symbolic dim.  With more than one batch row the longer
array cannot take the shorter one's memory in place: each row of axis 0 would have to move
up.  So a donated parameter that one concatenation extends along an axis ``a >= 1``, the
result returned, is taken in a *physical* array that is longer along ``a``: ``t + n + R``
for the grown length ``t + n`` and a new room dim ``R``; the array the caller passed is
its first ``t`` positions.

- the concatenation becomes ``update_slice(physical, new, at t)``: a donated update, which
  the backends write in place (only the new positions);
- the attention library call reading grown caches as its keys and values reads the
  physical arrays with key lengths ``t + n`` (``library.attention_lengths_name``) and never
  copies them; any other reader gets a slice;
- the result is the physical array; the driver hands the caller its first ``t + n``
  positions (a view) and takes that view back next call without a copy.

Caches grown to one length on one axis share the room dim (a group), so an attention
call's keys and values have one physical length.  ``attrs["growing"]`` lists the groups for
the driver (``relaxjax.growing``): per group ``(axis, grown length, room dim name,
((parameter position, its length t), ...), result positions)``, lengths as dim
expressions.  The driver picks the room before each call: views it made, when they share a
length with room for the call, else new arrays with a quarter more.
"""
from __future__ import annotations

import numpy as np
import sympy

from ..core import PRIMITIVES
from ..ir import Binding, Function, Literal, TensorType, Var
from ..library import LibraryFunc, attention_lengths_name, attention_name
from ..shapes import INF, prod, symbol
from .dce import dce_function
from .passes import Pass, rewrite_functions


def _growths(f: Function) -> dict:
    """Donated parameter -> (its concatenation binding, axis) for the parameters a single
    concatenation onto them (parameter first, one new part) extends along an axis >= 1 to
    a result."""
    donated = [f.params[i] for i in f.attrs.get("donated", ())]
    if not donated:
        return {}
    uses = f.uses()
    results = [r for r in f.results if isinstance(r, Var)]
    found = {}
    for p in donated:
        used = uses.get(p, [])
        if len(used) != 1 or used[0] == len(f.bindings):      # one reader, not a result
            continue
        b = f.bindings[used[0]]
        axis = b.params.get("axis") if b.kind == "primitive" else None
        if b.callee.name != "concatenate" or len(b.args) != 2 or b.args[0] is not p or \
                not isinstance(b.args[1], Var) or not isinstance(axis, int) or axis < 1 or \
                results.count(b.outvars[0]) != 1 or \
                not p.type.dtype == b.args[1].type.dtype == b.outvars[0].type.dtype:
            continue
        found[p] = (b, axis)
    return found


def _room_symbol(length, axis: int, taken: set) -> sympy.Symbol:
    """A new dim for the room after a group's grown length (named after the cache's dim)."""
    stem = length.name if isinstance(length, sympy.Symbol) else "cache"
    name = f"{stem}_room" if axis == 1 else f"{stem}_room{axis}"
    while name in taken:
        name += "_"
    taken.add(name)
    return symbol(name)


def _rewrite(f: Function, programs: dict) -> Function:
    growths = _growths(f)
    if not growths:
        return f
    taken = {s.name for s in f.dim_vars} | set(f.param_names)
    for b in f.bindings:
        for v in b.outvars:
            taken |= {s.name for s in v.type.free_symbols()}
    groups: dict = {}                 # (axis, grown length) -> room dim
    physical, grown = {}, {}          # parameter -> physical parameter; result -> (physical, group)
    bounds = dict(f.bounds)
    for p, (b, axis) in growths.items():
        key = (axis, b.outvars[0].type.shape[axis])
        if key not in groups:
            groups[key] = _room_symbol(p.type.shape[axis], axis, taken)
            bounds[groups[key]] = (0, INF)
        shape = list(p.type.shape)
        shape[axis] = key[1] + groups[key]
        physical[p] = Var(TensorType(tuple(shape), p.type.dtype), p.hint)
    bindings, rename, lengths = [], {}, {}
    keys: dict = {}                   # a grown cache as attention keys -> (physical view, (1, length))
    for b in f.bindings:
        args = [rename.get(a, a) if isinstance(a, Var) else a for a in b.args]
        p = args[0] if b.kind == "primitive" and b.callee.name == "concatenate" else None
        if p in growths and growths[p][0] is b:
            axis = growths[p][1]
            x, c, ph = args[1], b.outvars[0], physical[p]
            c_ph = Var(ph.type, c.hint)
            start = tuple(p.type.shape[axis] if i == axis else 0 for i in range(x.type.ndim))
            bindings.append(Binding([c_ph], PRIMITIVES["update_slice"], [ph, x],
                                    {"start": start, "size": tuple(x.type.shape),
                                     "step": (1,) * x.type.ndim}, b.source))
            view = Var(c.type, c.hint)       # the other readers' slice (dead-code eliminated if none)
            bindings.append(Binding([view], PRIMITIVES["slice"], [c_ph],
                                    {"start": (0,) * x.type.ndim, "size": tuple(c.type.shape),
                                     "step": (1,) * x.type.ndim}, b.source))
            grown[c] = (c_ph, (axis, c.type.shape[axis]))
            keys[c] = grown[c]
            rename[c] = view
            continue
        merged = _merged_view(b, grown)
        if merged is not None:          # also as the attention call's keys, (b * heads, t, 1, hd)
            bindings.append(merged[0])
            keys[b.outvars[0]] = merged[1:]
        call = _grown_attention(b, args, keys)
        if call is not None:
            q, k, v, scale, need = call
            at = (need, q.type.shape[0])
            if at not in lengths:
                lengths[at] = _lengths(bindings, need, q.type.shape[0], b.source)
            bindings.append(Binding(b.outvars, LibraryFunc(attention_lengths_name(q.type.dtype)),
                                    [q, k, v, scale, lengths[at]], {}, b.source))
            continue
        bindings.append(b if all(x is y for x, y in zip(args, b.args)) else
                        Binding(b.outvars, b.callee, args, b.params, b.source))
    growing = []
    for (axis, need), room in groups.items():
        members = tuple((f.params.index(p), p.type.shape[axis]) for p, (_, a) in growths.items()
                        if (a, growths[p][0].outvars[0].type.shape[a]) == (axis, need))
        out = tuple(i for i, r in enumerate(f.results) if r in grown and grown[r][1] == (axis, need))
        growing.append((axis, need, room.name, members, out))
    results = [grown[r][0] if r in grown else r for r in f.results]
    params = [physical.get(p, p) for p in f.params]
    attrs = dict(f.attrs, growing=tuple(growing))
    return dce_function(Function(f.name, params, f.param_names, bindings, results, bounds, f.guards, attrs))


def _merged_view(b: Binding, grown: dict):
    """For ``b`` a reshape of a cache grown along its second-to-last axis to
    ``(prod(leading dims), length, 1, last)`` (how ``AttentionCalls`` views keys stored as
    ``(b, heads, t, hd)``): the binding making the same view of its physical array, that
    view, and its group key along axis 1; else None."""
    if b.kind != "primitive" or b.callee.name != "reshape" or b.args[0] not in grown:
        return None
    c = b.args[0]
    c_ph, (axis, need) = grown[c]
    lead = prod(c.type.shape[:axis]) if axis else 1
    want = (lead, need, 1, c.type.shape[-1])
    got = b.outvars[0].type.shape
    if axis != c.type.ndim - 2 or len(got) != 4 or any(sympy.expand(x - y) != 0 for x, y in zip(got, want)):
        return None
    view = Var(TensorType((got[0], c_ph.type.shape[axis], 1, got[3]), c.type.dtype))
    return (Binding([view], PRIMITIVES["reshape"], [c_ph], {"new_sizes": view.type.shape}, b.source),
            view, (1, need))


def _grown_attention(b: Binding, args: list, keys: dict):
    """``(q, k, v, scale, grown length)`` when ``b`` is the attention library call (no
    mask, not causal) whose keys and values are caches grown in one group (``keys``: the
    concatenations' results and views of them): ``k`` and ``v`` their physical arrays;
    else None."""
    if b.kind != "library" or len(b.args) != 4:
        return None
    _, k, v, _ = b.args
    q, _, _, scale = args
    if k not in keys or v not in keys or keys[k][1] != keys[v][1] or keys[k][1][0] != 1 or \
            q.type.ndim != 4 or b.callee.name != attention_name(q.type.dtype, False):
        return None
    return q, keys[k][0], keys[v][0], scale, keys[k][1][1]


def _lengths(bindings: list, need, batch, source) -> Var:
    """Bindings (appended) making ``full(batch, need)`` int32: the key lengths."""
    n = Var(TensorType((), np.dtype("int32")))
    bindings.append(Binding([n], PRIMITIVES["convert"], [Literal(need, TensorType((), np.dtype("int64")))],
                            {"dtype": np.dtype("int32"), "weak": False}, source))
    out = Var(TensorType((batch,), np.dtype("int32")))
    bindings.append(Binding([out], PRIMITIVES["broadcast_to"], [n], {"shape": (batch,)}, source))
    return out


growing_caches = Pass("GrowingCaches", lambda module: rewrite_functions(module, _rewrite))
