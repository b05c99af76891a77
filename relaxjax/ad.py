"""Differentiation with JAX's names and semantics: ``vjp``, ``grad``, ``value_and_grad``,
``jvp`` and ``stop_gradient`` (``custom_vjp``, ``custom_jvp`` and ``checkpoint`` are in
``ad_custom``).

An interpreter over the traced program, run backwards (autodidax's design): the function
runs on the trace's tracers, its bindings are recorded as they are emitted, then cotangents
flow through those bindings in reverse, each primitive's ``vjp`` rule (defined with the
primitive in ``relaxjax.lax``, next to its shape and dtype rules; see ``lax.ad_util``)
emitting the backward computation into the same trace.  The derivative is therefore part of
the one traced program: fused, memory-planned and compiled once for every shape, like any
function under ``jit``.  Called on NumPy arrays, the transformed function is jit-compiled
(once per transformed function, for all shapes).

Forward mode (``jvp``) is reverse mode twice: the pullback ``u -> J^T u`` is linear in ``u``,
so the derivative of ``u -> <J^T u, t>`` with respect to ``u`` is ``J t``.  The second pass
runs the same vjp rules over the first pass's backward bindings; what computes ``J^T u``
itself is dead in the result and removed, so the compiled program is the forward pass and
one linear pass, as forward mode's would be.  ``stop_gradient`` marks values no derivative
flows through.

Control flow: ``fori_loop``, ``scan``, ``while_loop`` and ``cond`` carry rules
(``lax.control_flow``) that take the pullback of their regions from here (``_pullback``),
so the derivative of a loop is more loops in the same program (the carries stacked, then
the body's pullback run backwards) and that of a branch the same branch's pullback.

``jacfwd``/``jacrev`` map ``jvp``/the pullback over unit vectors with ``relaxjax.vmap``.

The rules of the ``linalg`` library calls are in ``ad_linalg``.  Not yet here (each raises
an error that names it): values of complex dtype computed from the differentiated inputs,
loop-level programs and other library calls (``custom_vjp`` gives them one).
"""
from __future__ import annotations

import functools
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import optree

from . import dtypes as dt
from . import nn
from . import numpy as rnp
from .core import PRIMITIVES, Tracer, current_trace, find_trace
from .ir import Var
from .ad_linalg import LINALG_VJPS
from .jit import jit, traced_or_jitted
from .library import attention_lengths_name, attention_name, attention_varlen_name
from .lax.ad_util import same_shape, zeros_like
from .lax.complex_parts import scalar

__all__ = ["vjp", "jvp", "grad", "value_and_grad", "jacfwd", "jacrev", "stop_gradient"]


def _leaves(tree) -> tuple[list, Any]:
    return optree.tree_flatten(tree, none_is_leaf=False)


def _differentiable(x: Tracer, what: str) -> None:
    if not dt.is_float(x.dtype):
        raise TypeError(f"{what} has dtype {x.dtype}: only floating-point inputs have gradients "
                        f"(convert integers with .astype(float))")


class _Recording:
    """``fun`` run on fresh copies of the inputs, with the bindings it emitted."""

    def __init__(self, fun: Callable, primals: Sequence, what: str):
        ctx = current_trace()
        convert = PRIMITIVES["convert"]
        self.ctx = ctx
        self.in_trees, self.inputs = [], []
        args = []
        for k, p in enumerate(primals):
            leaves, tree = _leaves(p)
            copies = []
            for j, leaf in enumerate(leaves):
                t = leaf if isinstance(leaf, Tracer) and leaf.ctx is ctx else Tracer(ctx, ctx.atom(leaf))
                _differentiable(t, f"{what}: input {k}" + (f" leaf {j}" if len(leaves) > 1 else ""))
                # a binding of its own: the input's uses inside ``fun`` are told apart from
                # every other use of the same value (x passed twice, a closure over it)
                copies.append(convert.bind(t, dtype=t.dtype, weak=t.weak_type))
            self.in_trees.append(tree)
            self.inputs.append(copies)
            args.append(optree.tree_unflatten(tree, copies))
        self.start = len(ctx.bindings)
        self.out = fun(*args)
        self.bindings = ctx.bindings[self.start:]
        # the float values computed from the inputs: only they take cotangents (a mask
        # built from an arange, an index computed from dims, need no rule)
        self.active = {x.atom for xs in self.inputs for x in xs}
        for b in self.bindings:
            if any(isinstance(a, Var) and a in self.active for a in b.args):
                self.active.update(v for v in b.outvars if _inexact(v.type.dtype) and v not in ctx.stopped)

    def backward(self, seeds: list) -> list:
        """The inputs' cotangents (trees like the inputs) from ``seeds``: (output tracer,
        its cotangent) pairs."""
        ct: dict = {}
        for out, c in seeds:
            if isinstance(out, Tracer) and isinstance(out.atom, Var):
                _accumulate(ct, out.atom, c)
        ctx = self.ctx
        for b in reversed(self.bindings):
            cts = [ct.pop(v, None) for v in b.outvars]
            if all(c is None for c in cts) or not any(v in self.active for v in b.outvars):
                continue
            if any(isinstance(v, Var) and v in self.active and dt.is_complex(v.type.dtype)
                   for v in (*b.outvars, *b.args)):
                raise NotImplementedError(_complex_unsupported(b))
            custom = ctx.custom_vjps.get(b.outvars[0])
            if custom is not None:            # an output of a custom_vjp call: its rule
                call, k = custom
                for a, c in call.take(k, cts[0]):
                    if c is not None and a in self.active:
                        _accumulate(ct, a, c)
                continue
            rule = getattr(b.callee, "vjp", None) if b.kind == "primitive" else \
                LIBRARY_VJPS.get(b.callee.name) if b.kind == "library" else None
            every = getattr(b.callee, "vjp_all_outputs", False)     # a loop: all its carries
            several = b.kind == "library" and len(b.outvars) != 1       # qr, eigh, svd
            if rule is None or (len(b.outvars) != 1 and not (every or several)):
                raise NotImplementedError(_no_rule(b))
            ins = [Tracer(ctx, a) for a in b.args]
            outs = [Tracer(ctx, v) for v in b.outvars]
            if every:
                got = rule(cts, *ins, outs=outs, pullback=_pullback, **b.params)
            elif several:
                got = rule([c if c is not None else zeros_like(o) for c, o in zip(cts, outs)], *ins, outs=outs)
            else:
                got = rule(cts[0], *ins, out=Tracer(ctx, b.outvars[0]), **b.params)
            for a, c in zip(b.args, got):
                if c is not None and isinstance(a, Var) and a in self.active:
                    _accumulate(ct, a, c)
        grads = []
        for tree, copies in zip(self.in_trees, self.inputs):
            leaves = [ct.get(x.atom) for x in copies]
            leaves = [g if g is not None else zeros_like(x) for g, x in zip(leaves, copies)]
            grads.append(optree.tree_unflatten(tree, leaves))
        return grads


def _attention_vjp(causal: bool):
    """The rule of the attention library call (``library.attention_name``): the scores
    recomputed in full (``nn.attention_scores``) and differentiated."""
    def rule(ct, q, k, v, scale, out):
        c = float(np.asarray(scale.atom.value))        # a literal: the call's constant scale
        _, pullback = vjp(lambda q, k, v: nn.attention_scores(q, k, v, None, None, c, causal), q, k, v)
        return (*pullback(ct), None)
    return rule


def _attention_lengths_vjp(ct, q, k, v, scale, lengths, out):
    """The rule of the attention call with key lengths: the scores, masked past each
    batch's length, recomputed and differentiated."""
    c = float(np.asarray(scale.atom.value))
    keep = nn.key_length_mask(lengths, k)
    _, pullback = vjp(lambda q, k, v: nn.attention_scores(q, k, v, None, keep, c, False), q, k, v)
    return (*pullback(ct), None, None)


# library functions with a derivative rule, by name (the others need rj.custom_vjp)
LIBRARY_VJPS = {attention_name(d, c): _attention_vjp(c) for d in ("float32", "float64") for c in (False, True)}
def _attention_qlengths_vjp(ct, q, k, v, scale, lengths, q_lengths, out):
    """With query lengths too: the rows past them are zeros, whatever q is there."""
    keep = rnp.arange(q.shape[1])[None, :] < q_lengths[:, None]
    ct = rnp.where(keep[:, :, None, None], ct, rnp.zeros((), ct.dtype))
    return (*_attention_lengths_vjp(ct, q, k, v, scale, lengths, out)[:4], None, None)


LIBRARY_VJPS.update({attention_lengths_name(d): _attention_lengths_vjp for d in ("float32", "float64")})
LIBRARY_VJPS.update({attention_lengths_name(d, True): _attention_qlengths_vjp for d in ("float32", "float64")})


def _attention_varlen_vjp(causal: bool, cross: bool = False):
    """The rule of attention over packed sequences (``library.attention_varlen_name``): the
    scores of all T packed query rows against all the key rows (T, or Tk for ``cross``),
    masked to each query's own sequence (and, when causal, to the keys at or before its
    position in it), recomputed and differentiated; the scale too, which may be traced.
    Memory O(N T Tk) (a varlen backward kernel would keep it per sequence)."""
    def positions(offsets, n):             # each packed row's sequence and position in it
        rows = rnp.arange(n)
        seq = rnp.searchsorted(offsets[1:], rows, side="right")
        return seq, rows - rnp.take(offsets, seq)

    def rule(ct, q, k, v, scale, offsets, *key_offsets, out):
        qseq, qpos = positions(offsets, q.shape[0])
        kseq, kpos = positions(key_offsets[0], k.shape[0]) if cross else (qseq, qpos)
        keep = qseq[:, None] == kseq[None, :]
        if causal:
            keep = rnp.logical_and(keep, kpos[None, :] <= qpos[:, None])
        if cross:                          # a query whose sequence has no keys: zeros, whatever q is
            has_keys = rnp.take(key_offsets[0][1:] - key_offsets[0][:-1], qseq) > 0
            ct = rnp.where(has_keys[:, None, None], ct, rnp.zeros((), ct.dtype))
        _, pullback = vjp(lambda q, k, v, c: nn.attention_scores(q, k, v, None, keep, c, False), q, k, v, scale)
        return (*pullback(ct), None) + ((None,) if cross else ())
    return rule


LIBRARY_VJPS.update({attention_varlen_name(d, c, x): _attention_varlen_vjp(c, x) for d in ("float32", "float64")
                     for c in (False, True) for x in (False, True)})
LIBRARY_VJPS.update(LINALG_VJPS)


def _pullback(fun: Callable, primals: list, cts: list) -> list:
    """The cotangents of ``primals`` (float tracers) for cotangents ``cts`` of the list
    ``fun(*primals)`` returns: what control-flow rules call on their regions."""
    rec = _Recording(fun, primals, "grad")
    return rec.backward(list(zip(rec.out, cts)))


def _accumulate(ct: dict, v: Var, c: Tracer) -> None:
    if not same_shape(tuple(c.type.shape), tuple(v.type.shape)) or c.dtype != v.type.dtype:
        raise AssertionError(f"internal error: a cotangent of type {c.dtype}{list(c.type.shape)} "
                             f"for a value of type {v.type}")
    prev = ct.get(v)
    ct[v] = c if prev is None else PRIMITIVES["add"].bind(prev, c)


def _inexact(dtype) -> bool:
    return dt.is_float(dtype) or dt.is_complex(dtype)


def _complex_unsupported(b) -> str:
    where = f" (traced at {b.source})" if b.source else ""
    return (f"grad through complex values is not implemented yet: {b.callee.name}{where} takes or "
            f"gives a complex value computed from the differentiated inputs (work on the real "
            f"and imaginary parts as float arrays instead)")


def _no_rule(b) -> str:
    where = f" (traced at {b.source})" if b.source else ""
    name = b.callee.name
    if b.kind in ("tir", "library"):
        return (f"grad through the {'loop-level program' if b.kind == 'tir' else 'library call'} "
                f"{name}{where} is not supported: relaxjax has no derivative rule for it "
                f"(give the function calling it one with rj.custom_vjp)")
    if getattr(b.callee, "kind", None) == "control":
        return f"grad through {name}{where} is not implemented yet (loops and branches have no rule)"
    return f"grad of {name}{where} is not implemented yet (the primitive has no vjp rule)"


def vjp(fun: Callable, *primals, has_aux: bool = False):
    """``(fun(*primals), vjp_fn)``, and ``aux`` third with ``has_aux``: ``vjp_fn(ct)`` gives
    the cotangents of the primals (a tuple, trees like them) for a cotangent ``ct`` of the
    output (a tree like it).  Inside ``jit`` (or another transformation's trace)."""
    if current_trace() is None:
        raise TypeError("relaxjax.vjp runs inside a trace (a function under rj.jit); use "
                        "rj.grad / rj.value_and_grad, which compile themselves, on NumPy arrays")
    rec = _Recording(fun, primals, "vjp")
    out, aux = (rec.out, None) if not has_aux else _split_aux(rec.out)

    def vjp_fn(ct):
        outs, tree = _leaves(out)
        cts, ct_tree = _leaves(ct)
        if ct_tree != tree:
            raise ValueError(f"vjp_fn: the cotangent's structure {ct_tree} is not the output's {tree}")
        seeds = []
        for k, (o, c) in enumerate(zip(outs, cts)):
            c = c if isinstance(c, Tracer) else Tracer(rec.ctx, rec.ctx.atom(np.asarray(c, o.dtype)))
            _require_like(c, o, f"vjp_fn: cotangent {k}", "the output")
            seeds.append((o, c))
        return tuple(rec.backward(seeds))
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def jvp(fun: Callable, primals: Sequence, tangents: Sequence, has_aux: bool = False):
    """``(fun(*primals), J @ tangents)`` like ``jax.jvp``: ``primals`` and ``tangents`` are
    sequences of equal length whose items are trees of equal structure, shapes and dtypes;
    the tangent output is a tree like the output (zeros where an output is not a float).
    With ``has_aux``, ``fun`` returns (output, aux) and aux comes third.  Called on NumPy
    arrays it is compiled once for every shape."""
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    if current_trace() is None and find_trace(list(primals) + list(tangents)) is None:
        return _jvp_jitted(fun, has_aux)(primals, tangents)
    rec = _Recording(fun, primals, "jvp")
    out, aux = (rec.out, None) if not has_aux else _split_aux(rec.out)
    outs, tree = _leaves(out)
    tans = []
    for k, (p, t) in enumerate(zip(rec.inputs, tangents)):
        leaves, t_tree = _leaves(t)
        if t_tree != rec.in_trees[k]:
            raise ValueError(f"jvp: tangent {k}'s structure {t_tree} is not its primal's {rec.in_trees[k]}")
        for j, (x, leaf) in enumerate(zip(p, leaves)):
            leaf = leaf if isinstance(leaf, Tracer) else Tracer(rec.ctx, rec.ctx.atom(np.asarray(leaf)))
            _require_like(leaf, x, f"jvp: tangent {k}" + (f" leaf {j}" if len(leaves) > 1 else ""),
                          "its primal")
            tans.append(leaf)
    floats = [k for k, o in enumerate(outs) if isinstance(o, Tracer) and dt.is_float(o.dtype)]

    def pairing(*us):
        """<J^T u, t>: linear in the seeds ``us`` (one per float output)."""
        cts = rec.backward([(outs[k], u) for k, u in zip(floats, us)])
        total = None
        for c, t in zip((leaf for tree_ in cts for leaf in _leaves(tree_)[0]), tans):
            term = PRIMITIVES["reduce_sum"].bind(PRIMITIVES["mul"].bind(c, t), axes=tuple(range(t.ndim)))
            total = term if total is None else PRIMITIVES["add"].bind(total, term)
        return total
    tangent_outs = [zeros_like(o) if isinstance(o, Tracer) else np.zeros_like(o) for o in outs]
    if floats and tans:
        second = _Recording(pairing, [zeros_like(outs[k]) for k in floats], "jvp")
        for k, g in zip(floats, second.backward([(second.out, scalar(1, second.out.dtype))])):
            tangent_outs[k] = g
    tangent_out = optree.tree_unflatten(tree, tangent_outs)
    return (out, tangent_out, aux) if has_aux else (out, tangent_out)


def _jacobian(fun: Callable, argnums: int, forward: bool) -> Callable:
    """The Jacobian ``J[out index + in index]`` of ``fun``'s array output with respect to
    its array argument ``argnums``: ``jvp`` mapped over the input's unit vectors
    (``forward``) or the pullback mapped over the output's (``vmap``), so one compiled
    program serves every size."""
    if not isinstance(argnums, int):
        raise TypeError("jacfwd/jacrev take one argument number (an int)")
    from . import numpy as rnp
    from .vmap import vmap

    def transformed(*args):
        x = args[argnums]

        def partial(v):
            full = list(args)
            full[argnums] = v
            return fun(*full)
        out, pull = vjp(partial, x)
        if not isinstance(out, Tracer):
            raise TypeError("jacfwd/jacrev: the function must return one array")
        out_shape, in_shape = tuple(out.shape), tuple(x.shape)
        if forward:         # a column per input element: the tangent along its unit vector
            basis = rnp.eye(x.size, dtype=x.dtype)
            cols = vmap(lambda e: jvp(partial, (x,), (e.reshape(in_shape),))[1].reshape(-1))(basis)
            flat = cols.T
        else:               # a row per output element: the pullback of its unit vector
            basis = rnp.eye(out.size, dtype=out.dtype)
            flat = vmap(lambda e: pull(e.reshape(out_shape))[0].reshape(-1))(basis)
        return flat.reshape(out_shape + in_shape)
    return traced_or_jitted(functools.wraps(fun)(transformed))


def jacfwd(fun: Callable, argnums: int = 0) -> Callable:
    """``jax.jacfwd``: the Jacobian by forward mode, a ``jvp`` per input element (see
    ``_jacobian``)."""
    return _jacobian(fun, argnums, forward=True)


def jacrev(fun: Callable, argnums: int = 0) -> Callable:
    """``jax.jacrev``: the Jacobian by reverse mode, a pullback per output element (see
    ``_jacobian``)."""
    return _jacobian(fun, argnums, forward=False)


def _jvp_jitted(fun: Callable, has_aux: bool) -> Callable:
    """``jvp`` of ``fun`` compiled, kept while ``fun`` lives (repeated calls trace once; a
    function dropped takes its compiled jvp with it).  The compiled function refers to
    ``fun`` weakly, or the cache would keep it alive; a callable that takes no weak
    reference (a builtin) is compiled for each call."""
    try:
        per_fun = _JVP_JITTED.setdefault(fun, {})
        ref = weakref.ref(fun)
    except TypeError:
        per_fun, ref = {}, (lambda: fun)
    got = per_fun.get(has_aux)
    if got is None:
        got = per_fun[has_aux] = jit(lambda primals, tangents: jvp(ref(), primals, tangents, has_aux=has_aux))
    return got


_JVP_JITTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # fun -> {has_aux: jitted}


def stop_gradient(x):
    """``x`` (a tree of arrays), through which no derivative flows (``jax.lax.stop_gradient``):
    ``grad(lambda x: (x * stop_gradient(x)).sum())(x)`` is ``x``.  Outside a trace, the
    arrays as they are."""
    leaves, tree = _leaves(x)
    out = []
    for leaf in leaves:
        if isinstance(leaf, Tracer):
            leaf = PRIMITIVES["convert"].bind(leaf, dtype=leaf.dtype, weak=leaf.weak_type)
            leaf.ctx.stopped.add(leaf.atom)
        out.append(leaf)
    return optree.tree_unflatten(tree, out)


def _require_like(v: Tracer, like: Tracer, what: str, whose: str) -> None:
    """``v`` (a tangent or a cotangent) has ``like``'s dtype, rank and dims (proved, or
    guarded in automatic mode), else an error naming ``what`` and ``whose`` value it is for."""
    if v.ndim != like.ndim or v.dtype != like.dtype:
        raise ValueError(f"{what} has type {v.type}; {whose} has {like.type}")
    for ax, (a, b) in enumerate(zip(v.type.shape, like.type.shape)):
        like.ctx.env.require_eq(a, b, f"{what} axis {ax} against {whose}'s")


def _split_aux(out):
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError("has_aux=True: the function must return a pair (output, aux)")
    return out[0], out[1]


def value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """``fun``'s value and its gradient with respect to the arguments ``argnums`` (an int:
    one gradient; a tuple: a tuple of them), like ``jax.value_and_grad``.  ``fun`` returns
    a float scalar (with ``has_aux``, a pair (scalar, aux); the result is then ((value, aux),
    grad)).  Compiled on first call with NumPy arrays, once for all shapes."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    def transformed(*args, **kwargs):
        for n in nums:
            if not -len(args) <= n < len(args):
                raise ValueError(f"argnums {n} is out of range for {len(args)} positional arguments")
        nums_ = [n % len(args) for n in nums]

        def partial(*diff):
            full = list(args)
            for n, d in zip(nums_, diff):
                full[n] = d
            return fun(*full, **kwargs)
        rec = _Recording(partial, [args[n] for n in nums_], "grad")
        out, aux = (rec.out, None) if not has_aux else _split_aux(rec.out)
        if not isinstance(out, Tracer) or out.ndim != 0 or not dt.is_float(out.dtype):
            what = f"an array of shape {tuple(out.type.shape)} and dtype {out.dtype}" \
                if isinstance(out, Tracer) else type(out).__name__
            raise TypeError(f"grad requires a function returning a float scalar; it returned "
                            f"{what} (rj.vjp differentiates other outputs)")
        grads = rec.backward([(out, scalar(1, out.dtype))])
        g = grads[0] if isinstance(argnums, int) else tuple(grads)
        return ((out, aux), g) if has_aux else (out, g)
    return traced_or_jitted(functools.wraps(fun)(transformed))


def grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """The gradient of ``fun`` (a float scalar function) with respect to arguments
    ``argnums``, like ``jax.grad``; with ``has_aux``, (gradient, aux)."""
    vg = value_and_grad(fun, argnums, has_aux)

    @functools.wraps(fun)
    def g(*args, **kwargs):
        value, grads = vg(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads
    return g
