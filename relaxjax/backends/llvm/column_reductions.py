"""Reductions over a leading axis, computed a block of columns at a time (the LLVM
backend's schedule for them).

A sum over rows (``x.sum(axis=0)``, a bias's gradient, a mean over the batch) lowers to

    parallel for i in range(m):               # the kept axis, contiguous in memory
      acc = 0
      reduction for r in range(n):
        acc = acc + f(x[r, i], ...)
      out[i] = g(acc)

which reads one element per row for each column: a stride of a whole row from one load to
the next, one scalar add per element (4x slower than NumPy for 256 x 2048).  Here the kept
loop runs over blocks of ``WIDTH`` columns, each block keeping ``WIDTH`` accumulators
through one pass over the rows:

    parallel for ib in range(ceil(m / WIDTH)):
      if ib * WIDTH + WIDTH <= m:
        acc_0 = 0; ...; acc_15 = 0
        reduction for r in range(n):
          acc_0 = acc_0 + f(x[r, ib * WIDTH + 0], ...)  ...  acc_15 = ... + 15]
        out[ib * WIDTH + 0] = g(acc_0)  ...
      else:                                    # the last, partial block: as before
        for i in range(ib * WIDTH, m): (the original body)

so a row's ``WIDTH`` contiguous elements are read together and added as one vector (LLVM's
SLP vectorizer), each column of a whole block summing its rows in order (the sequential
sum, bit for bit).  Loops over the rows that write an elementwise output fused with the
reduction become one loop too, writing a block of a row at a time.  It applies where the
kept loop's body is straight-line statements and loops over straight-line statements
whose bounds do not depend on the column, one of them a reduction that reads the kept
variable in a load's last index and its own variable in another.
"""
from __future__ import annotations

import dataclasses

from ...tir import INDEX, Assign, Const, For, If, Load, Local, PrimFunc, Seq, Store, Var, op
from ...tir.nodes import fresh
from ...tir.visit import map_expr, map_stmt_exprs, stmt_exprs, walk_expr, walk_stmts

WIDTH = 16


def block_column_reductions(f: PrimFunc) -> PrimFunc:
    """``f`` with each column reduction blocked (see above); ``f`` itself when none is."""
    found: list = []

    def taken() -> set:
        """The names ``f`` uses (for fresh ones), gathered when a block first needs them:
        most programs have no column reduction, and every kernel passes through here."""
        if not found:
            names = set(f.dim_vars) | {b.name for b in f.params}
            for x in walk_stmts(f.body):
                names |= {e.name for ex in stmt_exprs(x) for e in walk_expr(ex) if isinstance(e, Var)}
                if isinstance(x, (For, Local, Assign)):
                    names.add(x.var.name)
            found.append(names)
        return found[0]
    body = _rewrite(f.body, taken)
    return f if body is f.body else dataclasses.replace(f, body=body)


def _rewrite(s, taken):
    if isinstance(s, Seq):
        new = [_rewrite(x, taken) for x in s.stmts]
        return s if all(a is b for a, b in zip(new, s.stmts)) else Seq(new)
    if isinstance(s, For):
        found = _column_reduction(s) if s.kind in ("parallel", "serial") else None
        if found is not None:
            return _blocked(s, found, taken)
        body = _rewrite(s.body, taken)
        return s if body is s.body else For(s.var, s.extent, s.kind, body, s.start)
    if isinstance(s, If):
        then = _rewrite(s.then, taken)
        else_ = None if s.else_ is None else _rewrite(s.else_, taken)
        return s if then is s.then and else_ is s.else_ else If(s.cond, then, else_)
    return s


def _uses(e, v: Var) -> bool:
    return any(x is v for x in walk_expr(e))


def _straight(s) -> bool:
    return all(isinstance(x, (Store, Assign, Local, Seq)) for x in walk_stmts(s))


def _column_reduction(loop: For):
    """The statements of ``loop``'s body when it has the shape above, else None: locals
    and stores, and loops (the reduction, and loops over the rows writing an elementwise
    output fused with it) whose bodies are straight-line code and whose bounds are the
    same for every column; one of them a reduction reading the kept variable in its last
    index and its own variable in another."""
    if not (isinstance(loop.start, Const) and loop.start.value == 0):
        return None
    stmts = loop.body.stmts if isinstance(loop.body, Seq) else [loop.body]
    strided = False
    for s in stmts:
        if not isinstance(s, For):
            if not _straight(s):
                return None
            continue
        if _uses(s.extent, loop.var) or _uses(s.start, loop.var) or not _straight(s.body):
            return None               # a trip count per column (a masked prefix), nesting
        if s.kind != "reduction":
            continue
        for x in walk_stmts(s.body):
            for e in stmt_exprs(x):
                for ld in walk_expr(e):
                    if isinstance(ld, Load) and len(ld.index) >= 2 and ld.index[-1] is loop.var and \
                            any(_uses(i, s.var) for i in ld.index[:-1]):
                        strided = True
    return stmts if strided else None


def _blocked(loop: For, stmts: list, names) -> For:
    taken = names()
    ib = fresh(loop.var.name + "b", taken)
    first = op("mul", ib, Const(WIDTH, INDEX))
    lanes = []
    for lane in range(WIDTH):
        col = op("add", first, Const(lane, INDEX))
        renames = {}
        for x in walk_stmts(Seq(list(stmts))):
            if isinstance(x, Local):
                renames[x.var] = fresh(f"{x.var.name}_{lane}", taken, x.var.dtype)

        def sub(e, col=col, renames=renames):
            if e is loop.var:
                return col
            if isinstance(e, Var) and e in renames:
                return renames[e]
            return e
        lanes.append(lambda s, sub=sub, renames=renames: _substitute(s, sub, renames))
    full = []
    for s in stmts:
        if isinstance(s, For):        # one loop, the lanes side by side in its body
            kind = "reduction" if s.kind == "reduction" else "serial"
            full.append(For(s.var, s.extent, kind, Seq([lane(s.body) for lane in lanes]), s.start))
        else:
            full.extend(lane(s) for lane in lanes)
    rest = For(loop.var, loop.extent, "serial", loop.body, first)
    fits = op("le", op("add", first, Const(WIDTH, INDEX)), loop.extent)
    blocks = op("floor_div", op("add", loop.extent, Const(WIDTH - 1, INDEX)), Const(WIDTH, INDEX))
    return For(ib, blocks, loop.kind, If(fits, Seq(full), rest))


def _substitute(s, sub, renames: dict):
    """``s`` with expressions mapped by ``sub`` and assigned/declared locals renamed."""
    s = map_stmt_exprs(s, lambda e: map_expr(e, sub))
    return _rename_targets(s, renames)


def _rename_targets(s, renames: dict):
    if isinstance(s, Seq):
        return Seq([_rename_targets(x, renames) for x in s.stmts])
    if isinstance(s, Local):
        return Local(renames.get(s.var, s.var), s.init)
    if isinstance(s, Assign):
        return Assign(renames.get(s.var, s.var), s.value)
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, _rename_targets(s.body, renames), s.start)
    if isinstance(s, If):
        return If(s.cond, _rename_targets(s.then, renames),
                  None if s.else_ is None else _rename_targets(s.else_, renames))
    return s
