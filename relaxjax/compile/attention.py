"""Attention as users write it, found in the graph and replaced by the attention library
call (``library.attention_name``), which never forms the scores.

The pattern is scaled dot-product attention with a numerically stable softmax written out
(or ``nn.softmax``), over any batch dims::

    s = q @ k.swapaxes(-1, -2) * c          # or / c, or no scale; k.T for 2-D
    e = exp(s - max(s, axis=-1, keepdims=True))
    out = e / sum(e, axis=-1, keepdims=True) @ v

with ``q`` (..., T, H), ``k`` (..., S, H), ``v`` (..., S, Hv) of one float dtype (float32 or
float64) and the same batch dims.  ``out`` becomes ``call_library("nn.attention_f32", q',
k', v', c)`` on rank-4 views of the operands (the batch dims merged, one head) and a view of
its result; the bindings it made dead (the product, the softmax) go with dead-code
elimination.  A value of the pattern that something else reads (the weights returned as
well) is still computed for it.  A causal mask on the scores (``where(tri, s, -inf)``, an
additive ``triu`` of ``-inf``, ...; ``attention_masks``) makes it the causal call, a
key-length mask (``where(arange(S) <= pos, s, -1e9)``, padding from lengths) the key-lengths
call (``_call``: a row keeping no key still gets the written softmax's numbers); other masks
and biases are left as they are.
"""
from __future__ import annotations

import numpy as np

from ..core import PRIMITIVES
from ..ir import Binding, Function, Literal, TensorType, Var
from ..library import LibraryFunc, attention_lengths_name, attention_name
from ..shapes import is_symbolic, prod
from .attention_masks import KeyPrefix, is_one, causal_keep, key_prefix
from .dce import dce_function
from .passes import Pass, rewrite_functions

_DTYPES = (np.dtype("float32"), np.dtype("float64"))


def _primitive(defs: dict, v, *names: str) -> Binding | None:
    b = defs.get(v) if isinstance(v, Var) else None
    if b is None or b.kind != "primitive" or b.callee.name not in names:
        return None
    return b


def _scalar(a) -> float | None:
    if isinstance(a, Literal) and a.type.ndim == 0 and np.ndim(a.value) == 0:
        try:
            return float(a.value)
        except TypeError:              # a symbolic dim used as a value
            return None
    return None


def _row_reduction(defs: dict, v, name: str):
    """``x`` when ``v`` is ``name`` of ``x`` over its last axis with the axis kept (a
    reduction and a reshape to (..., 1)), else None."""
    r = _primitive(defs, v, "reshape")
    if r is None:
        return None
    red = _primitive(defs, r.args[0], name)
    if red is None or not isinstance(red.args[0], Var):
        return None
    x = red.args[0]
    n = x.type.ndim
    if tuple(red.params.get("axes", ())) != (n - 1,) or \
            tuple(r.outvars[0].type.shape) != tuple(x.type.shape[:-1]) + (1,):
        return None
    return x


def _negative(a) -> bool:
    """Whether ``a`` is a constant masking a score: -inf, or -1e8 or less (``-1e9``,
    ``finfo.min``), whose exp underflows to 0 beside any realistic score."""
    c = _scalar(a)
    return c is not None and c <= -1e8


def _scaled_scores(defs: dict, s):
    """``(q, k, scale, mask, bindings making k)`` when ``s`` is ``q @ swapaxes(k, -1, -2)``,
    times a constant (or divided by one) or not, and masked or not -- ``where(mask, s,
    -inf)``, ``where(~mask, -1e9, s)``, ``s + mask`` with the mask 0 where kept -- by a
    causal mask (``mask`` "causal", ``attention_masks.causal_keep``) or a key-length one
    (an ``attention_masks.KeyPrefix``), scale and mask in either order; else None."""
    scale, scaled, mask = 1.0, False, None
    shape = tuple(s.type.shape) if isinstance(s, Var) else ()
    rows, cols = shape[-2:] if len(shape) >= 2 else (None, None)
    while True:
        b = _primitive(defs, s, "mul", "div", "select", "add")
        if b is None:
            break
        name = b.callee.name
        if name in ("mul", "div"):
            x, y = b.args
            c = _scalar(y)
            if name == "mul" and c is None:
                x, c = y, _scalar(x)
            if c is None or c == 0 or scaled:
                return None
            scale, s, scaled = (c if name == "mul" else 1.0 / c), x, True
            continue
        if mask is not None:
            return None
        if name == "select":
            p, x, y = b.args
            if _negative(y) and isinstance(x, Var):
                s, kind, fill = x, "keep", _scalar(y)
            elif _negative(x) and isinstance(y, Var):
                s, kind, fill = y, "drop", _scalar(x)
            else:
                return None
            mask = "causal" if causal_keep(defs, p, rows, cols, kind) else \
                key_prefix(defs, p, shape, kind, fill)
            if mask is None:
                return None
        else:
            x, m = b.args
            if isinstance(m, Var) and causal_keep(defs, m, rows, cols, "add"):
                s = x
            elif isinstance(x, Var) and causal_keep(defs, x, rows, cols, "add"):
                s = m
            else:
                return None
            mask = "causal"
    if mask is not None and scale <= 0:
        return None
    mm = _primitive(defs, s, "matmul")
    if mm is None:
        return None
    q, kt = mm.args
    t = _primitive(defs, kt, "transpose")
    n = kt.type.ndim
    if t is None or not isinstance(q, Var) or not isinstance(t.args[0], Var) or n < 2:
        return None
    # the keys (..., S, H): the transposed operand itself, or (where Canonicalize merged
    # transposes, as of keys stored (..., S, heads, H), or einsum's "bqhd,bkhd->bhqk") another
    # transpose of its source
    src, perm = t.args[0], tuple(t.params["perm"])
    perm = perm[:-2] + (perm[-1], perm[-2])
    if perm == tuple(range(n)):
        return q, src, scale, mask, []
    k = Var(TensorType(tuple(kt.type.shape[:-2]) + (kt.type.shape[-1], kt.type.shape[-2]), kt.type.dtype))
    return q, k, scale, mask, [Binding([k], PRIMITIVES["transpose"], [src], {"perm": perm}, mm.source)]


def _attention(defs: dict, b: Binding):
    """``(q, k, v, scale, mask, bindings making k)`` when ``b`` computes attention as the
    module's docstring shows."""
    if b.kind != "primitive" or b.callee.name != "matmul":
        return None
    p, v = b.args
    dv = _primitive(defs, p, "div")
    if dv is None or not isinstance(v, Var):
        return None
    e, total = dv.args
    if _row_reduction(defs, total, "reduce_sum") is not e:
        return None
    ex = _primitive(defs, e, "exp")
    sub = None if ex is None else _primitive(defs, ex.args[0], "sub")
    if sub is None:
        return None
    s, most = sub.args
    if _row_reduction(defs, most, "reduce_max") is not s:
        return None
    found = _scaled_scores(defs, s)
    if found is None:
        return None
    q, k, scale, mask, pre = found
    dtype = b.outvars[0].type.dtype
    if dtype not in _DTYPES or any(x.type.dtype != dtype for x in (q, k, v)) or q.type.ndim < 2:
        return None
    batch = tuple(q.type.shape[:-2])
    if q.type.ndim != k.type.ndim or q.type.ndim != v.type.ndim or \
            tuple(k.type.shape[:-2]) != batch or tuple(v.type.shape[:-2]) != batch:
        return None                    # broadcast batch dims: left to the products
    return q, k, v, scale, mask, pre


_HEADS_FIRST = (0, 2, 1, 3)


def _heads_first(defs: dict, x, pre: list):
    """The (B, T, N, H) array ``x`` is a (B, N, T, H) transpose of, or None: q, k and v as
    ``nn.dot_product_attention``'s scores path views ``jax.nn``'s layout (``pre``: the
    bindings making ``k``, whose transpose may be the one)."""
    for b in pre:
        if b.outvars[0] is x:
            return b.args[0] if tuple(b.params["perm"]) == _HEADS_FIRST else None
    t = _primitive(defs, x, "transpose")
    if t is None or tuple(t.params["perm"]) != _HEADS_FIRST or not isinstance(t.args[0], Var):
        return None
    return t.args[0]


def _library_call(defs: dict, rename: dict, b: Binding, q: Var, k: Var, v: Var, scale: float,
                  mask, pre: list) -> tuple:
    """The bindings computing ``b``'s result through the attention library call, and the
    call's own result where ``b``'s is its (B, N, T, H) transpose (else None).  The call
    takes q, k, v in its layout (B, T, N, H) where they are transposes of arrays in it (and
    a key-length mask is the same for every head); else rank-4 views of them with the batch
    dims merged, one head (after ``pre``, the bindings making ``k``)."""
    dtype = q.type.dtype
    c = Literal(np.asarray(scale, dtype), TensorType((), dtype))
    prefix = mask if isinstance(mask, KeyPrefix) else None
    sources = [_heads_first(defs, x, pre) for x in (q, k, v)] if q.type.ndim == 4 else [None]
    sources = [rename.get(x, x) for x in sources]
    if all(x is not None for x in sources) and (prefix is None or is_one(prefix.shape[1])):
        out: list = []
        lengths = prefix and _key_lengths(out, prefix, prefix.shape[:1], q.type.shape[:1], k.type.shape[-2], b.source)
        o = Var(TensorType(tuple(q.type.shape[:1]) + (q.type.shape[2], q.type.shape[1], v.type.shape[3]), dtype))
        out += _call(o, sources, c, mask, lengths, b.source)
        out.append(Binding(b.outvars, PRIMITIVES["transpose"], [o], {"perm": _HEADS_FIRST}, b.source))
        return out, o
    reshape = PRIMITIVES["reshape"]
    batch = tuple(q.type.shape[:-2])
    nb = prod(batch) if batch else 1
    out = list(pre)

    def view(x: Var, sizes: tuple) -> Var:
        y = Var(TensorType(sizes, x.type.dtype))
        out.append(Binding([y], reshape, [x], {"new_sizes": sizes}, b.source))
        return y
    (t, h), (s, hv) = q.type.shape[-2:], v.type.shape[-2:]
    q4, k4, v4 = view(q, (nb, t, 1, h)), view(k, (nb, s, 1, h)), view(v, (nb, s, 1, hv))
    lengths = prefix and _key_lengths(out, prefix, prefix.shape[:-2], batch, s, b.source)
    o4 = Var(TensorType((nb, t, 1, hv), dtype))
    out += _call(o4, [q4, k4, v4], c, mask, lengths, b.source)
    out.append(Binding(b.outvars, reshape, [o4], {"new_sizes": tuple(b.outvars[0].type.shape)}, b.source))
    return out, None


def _call(o: Var, qkv: list, c: Literal, mask, lengths, source) -> list:
    """The bindings making ``o`` with the attention call on ``qkv`` (its layout); with key
    ``lengths``, a batch whose length is 0 gets what the written softmax gives there --
    every score the fill: uniform weights for a finite fill (the call on zero queries
    over all keys, computed for those batches alone), NaN for -inf -- not the call's zeros."""
    dtype = o.type.dtype
    if lengths is None:
        return [Binding([o], LibraryFunc(attention_name(dtype, mask == "causal")), [*qkv, c], {}, source)]
    call = LibraryFunc(attention_lengths_name(dtype))
    n = lengths.type.shape[0]
    i32 = np.dtype("int32")
    made = Var(o.type)
    some = Var(TensorType((n,), np.dtype(bool)))
    some4 = Var(TensorType((n, 1, 1, 1), np.dtype(bool)))
    out = [Binding([made], call, [*qkv, c, lengths], {}, source),
           Binding([some], PRIMITIVES["gt"], [lengths, Literal(np.asarray(0, i32), TensorType((), i32))], {}, source),
           Binding([some4], PRIMITIVES["reshape"], [some], {"new_sizes": (n, 1, 1, 1)}, source)]
    if np.isinf(mask.fill):
        alt = Literal(np.asarray(np.nan, dtype), TensorType((), dtype))
    else:
        q, k, v = qkv
        zeros, every, rest, alt = Var(q.type), Var(TensorType((), i32)), Var(lengths.type), Var(o.type)
        out += [Binding([zeros], PRIMITIVES["broadcast_to"], [Literal(np.asarray(0, dtype), TensorType((), dtype))],
                        {"shape": tuple(q.type.shape)}, source),
                Binding([every], PRIMITIVES["convert"], [Literal(k.type.shape[1], TensorType((), np.dtype("int64")))],
                        {"dtype": i32, "weak": False}, source),
                Binding([rest], PRIMITIVES["select"], [some, Literal(np.asarray(0, i32), TensorType((), i32)), every],
                        {}, source),
                Binding([alt], call, [zeros, k, v, c, rest], {}, source)]
    return out + [Binding([o], PRIMITIVES["select"], [some4, made, alt], {}, source)]


def _key_lengths(out: list, prefix: KeyPrefix, layout: tuple, sizes: tuple, keys, source) -> Var:
    """Bindings (appended to ``out``) making the call's key lengths, ``(prod(sizes),)``
    int32: the prefix's bound viewed as ``layout`` (its sizes along the batch dims
    ``sizes``), clipped to [0, keys] (``j <= bound`` keeps ``bound + 1``), broadcast and
    merged."""
    i64, i32 = np.dtype("int64"), np.dtype("int32")

    def bind(name: str, args: list, params: dict, shape: tuple, dtype) -> Var:
        y = Var(TensorType(shape, dtype))
        out.append(Binding([y], PRIMITIVES[name], args, params, source))
        return y

    def const(x) -> Literal:
        return Literal(x if is_symbolic(x) else np.asarray(x, i64), TensorType((), i64))
    x = prefix.bound
    if tuple(x.type.shape) != tuple(layout) and x.type.ndim:
        x = bind("reshape", [x], {"new_sizes": tuple(layout)}, tuple(layout), x.type.dtype)
    if x.type.dtype != i64:
        x = bind("convert", [x], {"dtype": i64, "weak": False}, tuple(x.type.shape), i64)
    shape = tuple(x.type.shape)
    low, high = (-1, keys - 1) if prefix.inclusive else (0, keys)
    x = bind("min", [bind("max", [x, const(low)], {}, shape, i64), const(high)], {}, shape, i64)
    if prefix.inclusive:
        x = bind("add", [x, const(1)], {}, shape, i64)
    x = bind("convert", [x], {"dtype": i32, "weak": False}, shape, i32)
    if shape != tuple(sizes):
        x = bind("broadcast_to", [x], {"shape": tuple(sizes)}, tuple(sizes), i32)
    if len(sizes) != 1:
        n = prod(sizes) if sizes else 1
        x = bind("reshape", [x], {"new_sizes": (n,)}, (n,), i32)
    return x


def _rewrite(f: Function, programs: dict) -> Function:
    defs = {v: b for b in f.bindings for v in b.outvars}
    bindings, changed = [], False
    heads_first: dict = {}            # a call's (B, N, T, H) result -> the call's own (B, T, N, H)
    rename: dict = {}
    for b in f.bindings:
        args = [rename.get(a, a) if isinstance(a, Var) else a for a in b.args]
        if b.kind == "primitive" and b.callee.name == "transpose" and args[0] in heads_first and \
                tuple(b.params["perm"]) == _HEADS_FIRST:
            rename[b.outvars[0]] = heads_first[args[0]]      # transposed back: the call's result
            continue
        found = _attention(defs, b)
        if found is None:
            bindings.append(b if all(x is y for x, y in zip(args, b.args)) else
                            Binding(b.outvars, b.callee, args, b.params, b.source))
            continue
        # (the operands as this rewrite left them: a result transposed back is the call's own)
        q, k, v, scale, mask, pre = found
        q, k, v = (rename.get(x, x) for x in (q, k, v))
        pre = [Binding(p.outvars, p.callee, [rename.get(a, a) for a in p.args], p.params, p.source) for p in pre]
        made, own = _library_call(defs, rename, b, q, k, v, scale, mask, pre)
        bindings += made
        if own is not None:
            heads_first[b.outvars[0]] = own
        changed = True
    if not changed:
        return f
    results = [rename.get(r, r) if isinstance(r, Var) else r for r in f.results]
    return dce_function(Function(f.name, f.params, f.param_names, bindings, results, f.bounds,
                                 f.guards, f.attrs))


attention_calls = Pass("AttentionCalls", lambda module: rewrite_functions(module, _rewrite))
