"""Functions with their own derivative rules, with JAX's names and semantics: ``custom_vjp``
(a reverse-mode rule), ``custom_jvp`` (a forward-mode rule) and ``checkpoint`` (``remat``:
recompute a function's intermediates in the backward pass instead of keeping them).

``custom_vjp`` is the mechanism the other two are built on: its call runs ``fwd``, marks the
outputs, and the backward pass (``ad._Recording.backward``) hands their cotangents to ``bwd``.
A ``custom_jvp`` rule is linear in the tangents, so its ``bwd`` is that linear map's pullback
(``vjp`` of the rule with respect to the tangents, at zero tangents); forward mode, being
reverse mode twice (``ad.jvp``), then runs the rule's own tangent computation.  A
``checkpoint``'s ``bwd`` runs the function again on its inputs and pulls the cotangents back
through that copy; the copy reads the inputs through ``convert(..., barrier=True)``, which
canonicalization neither folds nor merges with the forward pass, so the forward
intermediates die after their forward use and the copy's live only in the backward pass.
"""
from __future__ import annotations

import functools
import threading
from typing import Callable, Sequence

import numpy as np
import optree

from . import dtypes as dt
from .ad import _leaves, vjp
from .core import PRIMITIVES, Tracer, current_trace, find_trace
from .ir import Var
from .lax.ad_util import zeros_like

__all__ = ["custom_vjp", "custom_jvp", "checkpoint", "remat"]


class custom_vjp:
    """A function with its own reverse-mode rule, like ``jax.custom_vjp``::

        @rj.custom_vjp
        def f(x, y): ...
        def f_fwd(x, y): return f(x, y), residuals
        def f_bwd(residuals, g): return (gx, gy)      # one per argument not in nondiff_argnums
        f.defvjp(f_fwd, f_bwd)

    Differentiated (``grad``, ``vjp``, ``jvp``), a call runs ``fwd`` and the cotangents of
    its outputs reach the arguments only through ``bwd`` (a function calling loop-level
    programs or library calls, which have no rules, is differentiable this way).  Otherwise
    ``f`` runs as written.  The arguments in ``nondiff_argnums`` come first to ``bwd`` and
    take no cotangent."""

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun, self.nondiff = fun, tuple(nondiff_argnums)
        self.fwd = self.bwd = None
        self._in_fwd = threading.local()    # fwd calling the function runs it as written

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args):
        ctx = current_trace()
        if ctx is None or find_trace(list(args)) is None or getattr(self._in_fwd, "on", False):
            return self.fun(*args)
        if self.fwd is None:
            raise TypeError(f"custom_vjp function {getattr(self.fun, '__name__', self.fun)!r} has no "
                            f"rule: call its defvjp(fwd, bwd) first")
        self._in_fwd.on = True
        try:
            got = self.fwd(*args)
        finally:
            self._in_fwd.on = False
        if not (isinstance(got, tuple) and len(got) == 2):
            raise TypeError("custom_vjp: fwd must return a pair (output, residuals)")
        out, residuals = got
        outs, tree = _leaves(out)
        call = _CustomCall(self, args, residuals, tree, outs)
        marked = []
        for k, o in enumerate(outs):
            if isinstance(o, Tracer) and o.ctx is ctx and dt.is_float(o.dtype):
                o = PRIMITIVES["convert"].bind(o, dtype=o.dtype, weak=o.weak_type)
                ctx.custom_vjps[o.atom] = (call, k)
            marked.append(o)
        return optree.tree_unflatten(tree, marked)


class _CustomCall:
    """One traced call of a ``custom_vjp`` function: the cotangents of its outputs gather
    here as the backward pass meets them (the outputs' bindings run in reverse order, so
    the first output comes last), then ``bwd`` gives the arguments' cotangents."""

    def __init__(self, fn: custom_vjp, args: tuple, residuals, tree, outs: list):
        self.fn, self.args, self.residuals, self.tree, self.outs = fn, args, residuals, tree, outs
        self.cts: dict = {}
        self.waiting = {k for k, o in enumerate(outs) if isinstance(o, Tracer) and dt.is_float(o.dtype)}

    def take(self, k: int, c: Tracer) -> list:
        """Record output ``k``'s cotangent; once every float output has been met, the
        (argument Var, cotangent) pairs from ``bwd`` (else none yet)."""
        self.cts[k] = c
        self.waiting.discard(k)
        if self.waiting:
            return []
        cts = [self.cts[j] if j in self.cts else zeros_like(o) if isinstance(o, Tracer) else np.zeros_like(o)
               for j, o in enumerate(self.outs)]
        nondiff = [self.args[n] for n in self.fn.nondiff]
        got = self.fn.bwd(*nondiff, self.residuals, optree.tree_unflatten(self.tree, cts))
        diff = [a for n, a in enumerate(self.args) if n not in self.fn.nondiff]
        if not isinstance(got, (tuple, list)) or len(got) != len(diff):
            raise TypeError(f"custom_vjp: bwd must return a tuple of {len(diff)} cotangents (one "
                            f"per differentiable argument); it returned {type(got).__name__}"
                            + (f" of {len(got)}" if isinstance(got, (tuple, list)) else ""))
        pairs = []
        for n, (a, g) in enumerate(zip(diff, got)):
            a_leaves, a_tree = _leaves(a)
            g_leaves, g_tree = _leaves(g) if g is not None else ([None] * len(a_leaves), a_tree)
            if g_tree != a_tree:
                raise ValueError(f"custom_vjp: bwd's cotangent {n} has structure {g_tree}; the "
                                 f"argument has {a_tree}")
            for j, (x, c) in enumerate(zip(a_leaves, g_leaves)):
                if isinstance(x, Tracer) and isinstance(x.atom, Var) and c is not None:
                    c = c if isinstance(c, Tracer) else Tracer(x.ctx, x.ctx.atom(np.asarray(c, x.dtype)))
                    what = f"custom_vjp: bwd's cotangent {n}" + (f" leaf {j}" if len(a_leaves) > 1 else "")
                    if c.ndim != x.ndim:
                        raise ValueError(f"{what} has shape {tuple(c.type.shape)}; the argument has "
                                         f"{tuple(x.type.shape)}")
                    for ax, (cd, xd) in enumerate(zip(c.type.shape, x.type.shape)):
                        x.ctx.env.require_eq(cd, xd, f"{what} axis {ax} against the argument's")
                    if c.dtype != x.dtype:
                        c = PRIMITIVES["convert"].bind(c, dtype=x.dtype, weak=False)
                    pairs.append((x.atom, c))
        return pairs




def _float_leaf(x) -> bool:
    return isinstance(x, Tracer) and dt.is_float(x.dtype)


def _pullback_of(fun: Callable, args: Sequence, ct) -> tuple:
    """The cotangents of ``args`` (one per argument, a tree like it; None where no leaf is a
    float) of ``fun(*args)`` for the output cotangent ``ct``, through ``vjp`` with respect to
    the float leaves alone (integer and boolean leaves take no cotangent)."""
    flat = [_leaves(a) for a in args]
    where = [(k, j) for k, (leaves, _) in enumerate(flat) for j, x in enumerate(leaves) if _float_leaf(x)]

    def of_floats(*floats):
        full = [list(leaves) for leaves, _ in flat]
        for (k, j), x in zip(where, floats):
            full[k][j] = x
        return fun(*[optree.tree_unflatten(tree, leaves) for leaves, (_, tree) in zip(full, flat)])
    if not where:
        return (None,) * len(args)
    _, pull = vjp(of_floats, *[flat[k][0][j] for k, j in where])
    got = dict(zip(where, pull(ct)))
    out = []
    for k, (leaves, tree) in enumerate(flat):
        if not any((k, j) in got for j in range(len(leaves))):
            out.append(None)
            continue
        out.append(optree.tree_unflatten(tree, [got.get((k, j), zeros_like(x) if isinstance(x, Tracer)
                                                        else np.zeros_like(x)) for j, x in enumerate(leaves)]))
    return tuple(out)


class custom_jvp:
    """A function with its own forward-mode rule, like ``jax.custom_jvp``::

        @rj.custom_jvp
        def f(x, y): ...

        @f.defjvp
        def f_jvp(primals, tangents):           # (nondiff args first, when there are any)
            x, y = primals
            tx, ty = tangents
            return f(x, y), tangent_out          # tangent_out linear in the tangents

    or ``f.defjvps(rule_x, rule_y)``, ``rule_k(t_k, ans, *primals)`` giving argument k's
    part of the output tangent (None: the output does not depend on it).  Every
    derivative (``jvp``, ``grad``, ``vjp``, ``vmap`` of them) goes through the rule: reverse
    mode pulls the cotangents back through the rule's linear map of the tangents, so a rule
    written for stability (``log1p(exp(x))``'s ``sigmoid``) keeps its gradients finite where
    differentiating ``f`` itself would not.  Undifferentiated, ``f`` runs as written."""

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun, self.nondiff = fun, tuple(nondiff_argnums)
        self.rule = None
        self._as_vjp = custom_vjp(fun, nondiff_argnums)
        self._as_vjp.defvjp(self._fwd, self._bwd)

    def defjvp(self, jvp: Callable) -> Callable:
        self.rule = jvp
        return jvp

    def defjvps(self, *rules) -> None:
        """One rule per argument not in ``nondiff_argnums`` (None for none), each
        ``rule(t, ans, *primals)``: the output tangent is their sum."""
        def jvp(*args):
            nondiff, (primals, tangents) = args[:-2], args[-2:]
            ans = self.fun(*self._full(nondiff, primals))
            total = None
            for rule, t in zip(rules, tangents):
                if rule is None:
                    continue
                part = rule(t, ans, *primals)
                total = part if total is None else optree.tree_map(lambda a, b: a + b, total, part)
            if total is None:
                total = optree.tree_map(lambda a: zeros_like(a) if isinstance(a, Tracer) else np.zeros_like(a), ans)
            return ans, total
        self.rule = jvp

    def _full(self, nondiff, primals) -> list:
        """The call's arguments from the nondiff ones and the others, in their places."""
        nondiff, primals, args = list(nondiff), list(primals), []
        for k in range(len(nondiff) + len(primals)):
            args.append(nondiff.pop(0) if k in self.nondiff else primals.pop(0))
        return args

    def __call__(self, *args):
        if self.rule is None and current_trace() is not None and find_trace(list(args)) is not None:
            raise TypeError(f"custom_jvp function {getattr(self.fun, '__name__', self.fun)!r} has no "
                            f"rule: define one with its defjvp(jvp) or defjvps(...) first")
        return self._as_vjp(*args)

    def _fwd(self, *args):
        diff = [a for k, a in enumerate(args) if k not in self.nondiff]
        return self.fun(*args), tuple(diff)

    def _bwd(self, *args):
        nondiff, primals, ct = args[:-2], args[-2], args[-1]

        def tangent_out(*tangents):
            return self.rule(*nondiff, tuple(primals), tuple(tangents))[1]
        zeros = [optree.tree_map(lambda x: zeros_like(x) if isinstance(x, Tracer) else np.zeros_like(x), p)
                 for p in primals]
        return _pullback_of(tangent_out, zeros, ct)


def checkpoint(fun: Callable, *, prevent_cse: bool = True, static_argnums: Sequence[int] = ()) -> Callable:
    """``fun`` whose intermediates are not kept for the backward pass but computed again
    there from its inputs (``jax.checkpoint``, alias ``remat``): memory for the derivative of
    a deep stack of layers or a long loop body, paid for with one more forward pass of
    ``fun``.  ``prevent_cse`` (default): the copy reads its inputs through a barrier that
    canonicalization keeps, so it is not merged back into the forward pass.
    ``static_argnums``: arguments passed as they are (no cotangent)."""
    def recompute(*args):
        if prevent_cse:
            args = [optree.tree_map(_barrier, a) if k not in static_argnums else a
                    for k, a in enumerate(args)]
        return fun(*args)

    wrapped = custom_vjp(fun, nondiff_argnums=tuple(static_argnums))

    def fwd(*args):
        return fun(*args), tuple(a for k, a in enumerate(args) if k not in static_argnums)

    def bwd(*args):
        static, inputs, ct = args[:-2], list(args[-2]), args[-1]

        def again(*diff):
            full, diff = [], list(diff)
            for k in range(len(static) + len(inputs)):
                full.append(static[list(static_argnums).index(k)] if k in static_argnums else diff.pop(0))
            return recompute(*full)
        return _pullback_of(again, inputs, ct)
    wrapped.defvjp(fwd, bwd)
    return functools.wraps(fun)(lambda *args: wrapped(*args))


remat = checkpoint


def _barrier(x):
    """``x`` through a ``convert`` to its own dtype that canonicalization keeps (``checkpoint``)."""
    if not isinstance(x, Tracer):
        return x
    return PRIMITIVES["convert"].bind(x, dtype=x.dtype, weak=x.weak_type, barrier=True)
