"""Static checks of a kernel's program for one binding of its dims: an access whose index is
provably out of bounds whenever it runs (``x[i + 1, j]`` with ``i`` over
``range(x.shape[0])``) is a ``ShapeError`` at trace time, naming the kernel, the source
line, the buffer, the axis, the index's reach and the axis size.

Each loop variable ranges over ``[start, extent - 1]``; an index affine in the loop
variables (coefficients of known sign, in dims) is pushed to its extremes, innermost loop
first, and compared with the axis size by the shape environment's proofs (dims within their
bounds).  Accesses under an ``if`` (or the lazy side of ``and``/``or``/``x if c else y``)
may be guarded and are not checked, nor are indices that depend on data.
"""
from __future__ import annotations

import sympy

from ..tir import Assign, For, If, Load, Local, Store, expr_str, to_sympy
from ..tir.visit import StmtVisitor, walk_expr_guarded
from ..errors import ShapeError
from ..shapes import ShapeEnv, dim_str, normalize, symbol


def _to_sympy(e, loops: dict, dims: set):
    return to_sympy(e, lambda v: loops[v.name] if v.name in loops else
                    symbol(v.name) if v.name in dims else None)


def _extreme(e, sym, lo, hi, env, loop_syms, want_max):
    if sym not in e.free_symbols:
        return e
    e = sympy.expand(e)
    if not e.is_polynomial(sym) or sympy.degree(e, sym) != 1:
        return None
    c = e.coeff(sym, 1)
    if c.free_symbols & loop_syms:
        return None
    pos, neg = env.try_prove(">=", normalize(c), 0), env.try_prove("<=", normalize(c), 0)
    if not pos and not neg:
        return None
    bound = hi if (pos and want_max) or (neg and not want_max) else lo
    if bound is None:
        return None
    return sympy.expand(e.xreplace({sym: bound}))


class _Checker(StmtVisitor):
    def __init__(self, f, env: ShapeEnv, fail):
        self.f, self.env, self.fail = f, env, fail
        self.dims = set(f.dim_vars)
        self.loops: dict = {}             # loop var name -> sympy symbol
        self.ranges: list = []            # (symbol, lo, hi) outermost first
        self.guarded = False              # under an if: accesses may be guarded

    def visit_For(self, s: For) -> None:
        self.expr(s.start)
        self.expr(s.extent)
        sym = sympy.Symbol(f"_loop_{s.var.name}", integer=True)
        lo = _to_sympy(s.start, self.loops, self.dims)
        hi = _to_sympy(s.extent, self.loops, self.dims)
        self.loops[s.var.name] = sym
        self.ranges.append((sym, lo, None if hi is None else hi - 1))
        self.visit(s.body)
        self.ranges.pop()
        del self.loops[s.var.name]

    def visit_If(self, s: If) -> None:
        self.expr(s.cond)
        outer, self.guarded = self.guarded, True
        self.generic_visit(s)
        self.guarded = outer

    def visit_Store(self, s: Store) -> None:
        for i in s.index:
            self.expr(i)
        self.access(s, s.buffer, s.index, self.guarded)
        self.expr(s.value)

    def visit_Local(self, s: Local) -> None:
        self.expr(s.init)

    def visit_Assign(self, s: Assign) -> None:
        self.expr(s.value)

    def expr(self, e) -> None:
        """Check every load in ``e`` (its indices' loads included)."""
        for x, lazy in walk_expr_guarded(e):
            if isinstance(x, Load):
                self.access(x, x.buffer, x.index, self.guarded or lazy)

    def access(self, node, buf, index, guarded: bool) -> None:
        """Fail on ``buf[index]`` if it is out of bounds whenever it runs (not ``guarded``)."""
        if guarded:
            return
        loop_syms = {s for s, _, _ in self.ranges}
        for ax, (i, size) in enumerate(zip(index, buf.shape)):
            e = _to_sympy(i, self.loops, self.dims)
            if e is None:
                continue
            hi_e, lo_e = e, e
            for sym, lo, hi in reversed(self.ranges):
                hi_e = None if hi_e is None else _extreme(hi_e, sym, lo, hi, self.env, loop_syms, True)
                lo_e = None if lo_e is None else _extreme(lo_e, sym, lo, hi, self.env, loop_syms, False)
            for v, bad in ((hi_e, lambda v: self.env.try_prove(">=", v, size)),
                           (lo_e, lambda v: self.env.try_prove("<", v, 0))):
                if v is None or v.free_symbols & loop_syms:
                    continue
                v = normalize(v)
                if bad(v) is True:
                    self.fail(node, f"index {expr_str(i)} into axis {ax} of {buf.name} (size "
                                    f"{dim_str(size)}) reaches {dim_str(v)}: out of bounds")


def check_bounds(f, env: ShapeEnv, fail) -> None:
    """Raise (through ``fail(tir node, message)``) on an access provably out of bounds."""
    _Checker(f, env, fail).visit(f.body)


def raise_shape_error(src, node_of: dict):
    def fail(node, msg):
        raise ShapeError(f"{src.where(node_of.get(id(node)))}: {msg}")
    return fail
