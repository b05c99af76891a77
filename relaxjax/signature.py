"""Binding dim variables from actual argument shapes, and checking a traced entry's constraints.

From a traced function's parameter types (``x: f32[n, k]``, ``w: f32[k, m * 2]``), its bounds
and its guards, :func:`make_binder` generates a small Python function that reads the dims off
the argument shapes, solves linear expressions (``m * 2`` -> ``m``), checks every other axis,
every bound and every guard, and returns the dim values, or the index of the first failed
step so that :meth:`Binder.explain` can say what was wrong.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import sympy

from .errors import ShapeError
from .shapes import INF, Guard, dim_str, free_symbols, normalize, DEFAULT_BOUNDS


@dataclass
class Step:
    kind: str          # "bind" | "solve" | "check" | "bound" | "guard"
    leaf: int = -1
    axis: int = -1
    expr: object = None
    sym: object = None
    coeff: int = 1
    rest: object = 0
    lo: object = 1
    hi: object = INF
    guard: Guard | None = None


class Binder:
    """``binder(shapes) -> tuple of dim values`` or ``int`` (index of the failed step)."""

    def __init__(self, steps: list, symbols: list, leaf_names: Sequence[str], fn):
        self.steps = steps
        self.symbols = symbols
        self.names = [s.name for s in symbols]
        self.leaf_names = list(leaf_names)
        self._fn = fn

    def __call__(self, shapes):
        return self._fn(shapes)

    def explain(self, shapes, failed: int) -> str:
        """A message naming argument, axis, expected expression and actual value."""
        known: dict = {}
        for i, st in enumerate(self.steps):
            if i == failed:
                break
            if st.kind == "bind":
                known[st.sym.name] = shapes[st.leaf][st.axis]
            elif st.kind == "solve":
                t = shapes[st.leaf][st.axis] - _ev(st.rest, known)
                known[st.sym.name] = t // st.coeff
        st = self.steps[failed]
        ctx = ", ".join(f"{k}={v}" for k, v in known.items())
        ctx = f" (with {ctx})" if ctx else ""
        if st.kind in ("check", "solve"):
            actual = shapes[st.leaf][st.axis]
            return (f"argument {self.leaf_names[st.leaf]} axis {st.axis}: expected {dim_str(st.expr)}"
                    f"{ctx}, got {actual}")
        if st.kind in ("bind", "bound"):
            v = known.get(st.sym.name, shapes[st.leaf][st.axis] if st.leaf >= 0 else None)
            hi = "inf" if st.hi == INF else st.hi
            where = f"argument {self.leaf_names[st.leaf]} axis {st.axis}: " if st.leaf >= 0 else ""
            return f"{where}dim {st.sym.name} = {v} is outside its bounds [{st.lo}, {hi}]"
        return f"shape constraint {st.guard} does not hold{ctx}"


def _ev(e, known):
    if isinstance(e, int):
        return e
    return int(e.xreplace({sympy.Symbol(k, integer=True, nonnegative=True): v for k, v in known.items()}))


def _linear(d, s):
    """(a, rest) with d == a*s + rest and integer a != 0, or None."""
    if not d.is_polynomial(s) or sympy.degree(d, s) != 1:
        return None
    a = d.coeff(s, 1)
    if not a.is_Integer or a == 0:
        return None
    return int(a), normalize(sympy.expand(d - a * s))


def make_binder(param_shapes: Sequence[tuple], leaf_names: Sequence[str], bounds: dict,
                guards: Sequence[Guard], what: str = "function") -> Binder:
    steps: list[Step] = []
    known: set = set()
    order: list = []
    pending = [(leaf, ax, d) for leaf, shp in enumerate(param_shapes) for ax, d in enumerate(shp)]
    pending.sort(key=lambda it: 0 if isinstance(it[2], sympy.Symbol) else 1)

    def bound_step(s, leaf, ax):
        lo, hi = bounds.get(s, DEFAULT_BOUNDS)
        steps.append(Step("bound", leaf, ax, sym=s, lo=lo, hi=hi))

    while pending:
        progress = False
        for item in list(pending):
            leaf, ax, d = item
            unknown = free_symbols(d) - known
            if not unknown:
                steps.append(Step("check", leaf, ax, expr=d))
            elif len(unknown) == 1:
                (s,) = unknown
                if d == s:
                    steps.append(Step("bind", leaf, ax, expr=d, sym=s))
                else:
                    lin = _linear(d, s)
                    if lin is None:
                        continue
                    steps.append(Step("solve", leaf, ax, expr=d, sym=s, coeff=lin[0], rest=lin[1]))
                known.add(s)
                order.append(s)
                bound_step(s, leaf, ax)
            else:
                continue
            pending.remove(item)
            progress = True
        if not progress:
            leaf, ax, d = pending[0]
            raise ShapeError(f"{what}: argument {leaf_names[leaf]} axis {ax} has shape expression "
                             f"{dim_str(d)}, which cannot be solved for its dims; declare a plain dim "
                             f"for it (or for one of {', '.join(sorted(s.name for s in free_symbols(d)))})")
    for g in guards:
        steps.append(Step("guard", guard=g))

    # The generated code names each dim by its index (_d0, _d1, ...), never by the user's
    # name: a dim called __S or __t would otherwise rebind the code's own variables.
    local = {}
    for g in guards:
        for sym in sorted(free_symbols(g.lhs) | free_symbols(g.rhs), key=lambda x: x.name):
            local.setdefault(sym, None)
    local = {sym: sympy.Symbol(f"_d{k}", integer=True, nonnegative=True)
             for k, sym in enumerate([*order, *(x for x in local if x not in order)])}

    def expr(d) -> str:
        return dim_str(d if isinstance(d, int) else d.xreplace(local))

    lines = ["def __binder(__S):"]
    for i, st in enumerate(steps):
        if st.kind == "bind":
            lines.append(f"    {expr(st.sym)} = __S[{st.leaf}][{st.axis}]")
        elif st.kind == "solve":
            lines.append(f"    __t = __S[{st.leaf}][{st.axis}] - ({expr(st.rest)})")
            lines.append(f"    if __t % {st.coeff}: return {i}")
            lines.append(f"    {expr(st.sym)} = __t // {st.coeff}")
        elif st.kind == "check":
            lines.append(f"    if __S[{st.leaf}][{st.axis}] != ({expr(st.expr)}): return {i}")
        elif st.kind == "bound":
            cond = f"{expr(st.sym)} < {st.lo}"
            if st.hi != INF:
                cond += f" or {expr(st.sym)} > {st.hi}"
            lines.append(f"    if {cond}: return {i}")
        else:
            g = st.guard
            lines.append(f"    if not (({expr(g.lhs)}) {g.op} ({expr(g.rhs)})): return {i}")
    lines.append(f"    return ({''.join(expr(s) + ', ' for s in order)})")
    ns: dict = {"min": min, "max": max}
    exec(compile("\n".join(lines), "<relaxjax binder>", "exec"), ns)  # noqa: S102 (generated)
    return Binder(steps, order, leaf_names, ns["__binder"])
