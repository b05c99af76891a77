"""Loop bounds from masks: a reduction that masks its own loop variable runs only the
iterations the mask keeps.

NumPy code sums a prefix with a slice, ``L[i, :i] @ x[:i]``; inside a ``fori_loop`` the
prefix length is the loop index, which no static shape can hold, so the JAX spelling masks
the whole row instead: ``np.sum(np.where(np.arange(n) < i, L[i] * x, 0))``.  Fused, that is

    acc = 0
    reduction for r in range(n):
        acc = acc + select(r < i, L[i, r] * x[r], 0)

which reads the whole row to use half of it.  An iteration whose mask is false adds the
reducer's identity -- it changes nothing -- so the loop may skip it: here the loop becomes
``range(0, min(max(i, 0), n))`` and the select goes.  Triangular solves, Levinson-Durbin and
other recurrences over a growing prefix then do NumPy's half of the work, in one vectorized
loop.

Only conjuncts that compare the loop variable (as an integer) with an integer expression
free of it move into the bounds; the rest of the mask stays.  Skipping iterations only ever
evaluates less, so an element the mask hides is never read.
"""
from __future__ import annotations

import math

import numpy as np

from ..tir import INDEX, Assign, Const, Expr, For, If, Load, Local, Op, PrimFunc, Seq, Store, Var, op
from ..tir.visit import stmt_children, walk_expr

def _lowest(d: np.dtype):
    return -math.inf if d.kind == "f" else np.iinfo(d).min if d.kind in "iu" else False


def _highest(d: np.dtype):
    return math.inf if d.kind == "f" else np.iinfo(d).max if d.kind in "iu" else True


# the reducer's combine op -> whether a constant is its identity (``acc op c == acc``)
_IDENTITY = {
    "add": lambda c: c.value == 0,
    "mul": lambda c: c.value == 1,
    "max": lambda c: c.value == _lowest(c.dtype),
    "min": lambda c: c.value == _highest(c.dtype),
    "or": lambda c: c.value == 0,
    "and": lambda c: c.value == 1,
}
# comparison with the loop variable on the left, and its mirror (the variable on the right)
_MIRROR = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq"}
_NEGATION = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}


def bound_masked_loops(f: PrimFunc) -> PrimFunc:
    """``f`` with every reduction loop whose update is masked by its own variable narrowed to
    the iterations the mask keeps (in place; returns ``f``)."""
    todo = [f.body]
    while todo:
        s = todo.pop()
        if isinstance(s, For) and s.kind == "reduction":
            _narrow(s)
        todo.extend(stmt_children(s))
    return f


def _narrow(loop: For) -> None:
    body = loop.body
    if isinstance(body, Seq) and len(body.stmts) == 1:
        body = body.stmts[0]
    if not isinstance(body, Assign):
        return
    upd = body.value
    if not (isinstance(upd, Op) and upd.name in _IDENTITY and len(upd.args) == 2 and
            isinstance(upd.args[0], Var) and upd.args[0].name == body.var.name):
        return
    x = upd.args[1]
    wrap = None
    if isinstance(x, Op) and x.name == "convert":      # a widened accumulator
        wrap, x = x, x.args[0]
    if not (isinstance(x, Op) and x.name == "select" and isinstance(x.args[2], Const) and
            _IDENTITY[upd.name](x.args[2])):
        return
    start, stop = loop.start, loop.extent
    kept = []
    for c in _conjuncts(x.args[0]):
        b = _bound(c, loop.var.name, body.var.name)
        if b is None:
            kept.append(c)
            continue
        kind, e = b
        start, stop = _apply(kind, e, start, stop)
    if len(kept) == len(_conjuncts(x.args[0])):
        return
    value = x.args[1]
    if kept:
        cond = kept[0]
        for c in kept[1:]:
            cond = op("and", cond, c)
        value = op("select", cond, value, x.args[2], dtype=x.dtype)
    if wrap is not None:
        value = op("convert", value, dtype=wrap.dtype)
    body.value = Op(upd.name, (upd.args[0], value), upd.dtype, upd.flags)
    loop.start, loop.extent = start, stop


def _conjuncts(e: Expr) -> list:
    out, todo = [], [e]
    while todo:
        x = todo.pop()
        if isinstance(x, Op) and x.name == "and" and x.dtype == np.dtype(bool):
            todo.extend(reversed(x.args))
        else:
            out.append(x)
    return out


def _is_var(e: Expr, name: str) -> bool:
    """``e`` is the loop variable, possibly converted to another integer type (exact: loop
    variables are small non-negative int64s)."""
    while isinstance(e, Op) and e.name == "convert" and e.dtype.kind in "iu":
        e = e.args[0]
    return isinstance(e, Var) and e.name == name


def _free_of(e: Expr, names: tuple) -> bool:
    return not any(isinstance(x, Var) and x.name in names for x in walk_expr(e))


def _bound(c: Expr, var: str, acc: str):
    """``(kind, e)`` when ``c`` is ``var <kind> e`` (or mirrored) with an integer ``e`` free
    of the loop variable and the accumulator; else None."""
    if not (isinstance(c, Op) and c.name in _MIRROR and len(c.args) == 2):
        return None
    a, b = c.args
    if _is_var(a, var):
        kind, e = c.name, b
    elif _is_var(b, var):
        kind, e = _MIRROR[c.name], a
    else:
        return None
    if e.dtype.kind not in "iu" or not _free_of(e, (var, acc)):
        return None
    if e.dtype.kind == "u" and e.dtype.itemsize == 8:
        return None              # a uint64 above 2**63 has no int64 form
    if e.dtype != INDEX:
        e = op("convert", e, dtype=INDEX)
    return kind, e


def _clamp(e: Expr, lo: Expr, hi: Expr) -> Expr:
    return op("min", op("max", e, lo), hi)


def _apply(kind: str, e: Expr, start: Expr, stop: Expr) -> tuple[Expr, Expr]:
    """The sub-range of ``[start, stop)`` where ``var <kind> e`` holds.  ``e`` is clamped into
    the range before any +1, so nothing overflows whatever ``e`` is."""
    if kind in ("lt", "le", "eq"):
        new_stop = _clamp(e, start, stop) if kind == "lt" else _clamp(e, start - 1, stop - 1) + 1
    else:
        new_stop = stop
    if kind in ("gt", "ge", "eq"):
        new_start = _clamp(e, start, stop) if kind in ("ge", "eq") else _clamp(e, start - 1, stop - 1) + 1
    else:
        new_start = start
    return new_start, new_stop


def update_region(f: PrimFunc, src, dst):
    """What an update program changes when its output ``dst`` is its input ``src`` (one
    buffer, updated in place): for ``dst[i..] = if_then_else(c, x, src[i..])`` over a loop
    nest covering ``dst`` (``dynamic_update_slice``, ``x.at[a:b].set`` lowered and fused;
    or ``if_then_else(i < n, src[i..], x)``, a concatenation onto ``src``),
    the same nest narrowed to where ``c``'s conjuncts on each loop variable hold, storing
    ``x`` where the rest of ``c`` holds; the other elements would only be copied onto
    themselves.  None for a program of another form."""
    loops, s = [], f.body
    while isinstance(s, For):
        loops.append(s)
        s = s.body
        if isinstance(s, Seq) and len(s.stmts) == 1:
            s = s.stmts[0]
    if isinstance(s, Seq) and len(s.stmts) == 2 and isinstance(s.stmts[0], Local) and \
            isinstance(s.stmts[1], Store) and isinstance(s.stmts[1].value, Var) and \
            s.stmts[1].value.name == s.stmts[0].var.name:      # v = ...; dst[i..] = v
        s = Store(s.stmts[1].buffer, s.stmts[1].index, s.stmts[0].init)
    if not loops or not (isinstance(s, Store) and s.buffer is dst):
        return None
    v = s.value
    if not (isinstance(v, Op) and v.name == "if_then_else" and len(v.args) == 3):
        return None
    cond, x, other = v.args
    names = tuple(loop.var.name for loop in loops)
    if isinstance(x, Load) and x.buffer is src and isinstance(cond, Op) and cond.name in _NEGATION:
        # ``if_then_else(i < n, src[i..], x)`` (a concatenation onto ``src``): the update is
        # where the comparison fails
        cond, x, other = Op(_NEGATION[cond.name], cond.args, cond.dtype), other, x
    if not (isinstance(other, Load) and other.buffer is src and
            [getattr(i, "name", None) for i in other.index] == list(names) and
            [getattr(i, "name", None) for i in s.index] == list(names)):
        return None
    bounds = {n: (loop.start, loop.extent) for n, loop in zip(names, loops)}
    kept = []
    for c in _conjuncts(cond):
        b = next(((n, _bound(c, n, n)) for n in names if _bound(c, n, n) is not None), None)
        if b is None or not _free_of(b[1][1], names):
            kept.append(c)
            continue
        n, (kind, e) = b
        bounds[n] = _apply(kind, e, *bounds[n])
    body = Store(dst, s.index, x)
    if kept:
        test = kept[0]
        for c in kept[1:]:
            test = op("and", test, c)
        body = If(test, body)
    for loop in reversed(loops):
        start, stop = bounds[loop.var.name]
        body = For(loop.var, stop, "serial", body, start)
    return body
