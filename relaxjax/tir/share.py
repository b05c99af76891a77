"""Shared subexpressions bound to locals, for statements that would otherwise be huge.

FuseTIR shares the node of a value read several times at one index, so a program's
expressions are DAGs.  Everything that reads them as trees -- the printer, the verifier,
the analyses, the backends -- pays for the tree: a chain of n steps that each read the last
value three times (``crc = where(crc & 1, crc >> 1 ^ p, crc >> 1)``, unrolled) is a DAG of
O(n) nodes and a tree of 3 ** n.  ``bind_shared`` rewrites a statement whose tree is over a
budget so that each shared node is computed once into a local before it.  Statements under
the budget are left as they are (small programs keep their single-store loop nests, which
inlining and vectorization look for).
"""
from __future__ import annotations

from .nodes import Assign, For, If, Load, Local, Op, Seq, Stmt, Store, fresh
from .visit import LAZY_OPS, expr_children, _rebuild

TREE_BUDGET = 4096


def bind_shared(s: Stmt, taken: set, budget: int = TREE_BUDGET) -> Stmt:
    """``s`` with every statement whose expressions, written as trees, exceed ``budget``
    nodes preceded by locals for its shared subexpressions (new names are added to
    ``taken``).  Only nodes evaluated on every path through the statement are bound: a node
    used only inside a lazy branch (``if_then_else``) may be invalid outside it (an index
    past a concatenated part's end)."""
    if isinstance(s, Seq):
        return Seq([x for y in s.stmts for x in _flat(bind_shared(y, taken, budget))])
    if isinstance(s, For):
        body = bind_shared(s.body, taken, budget)
        return s if body is s.body else For(s.var, s.extent, s.kind, body, s.start)
    if isinstance(s, If):
        then = bind_shared(s.then, taken, budget)
        els = None if s.else_ is None else bind_shared(s.else_, taken, budget)
        return s if (then is s.then and els is s.else_) else If(s.cond, then, els)
    if isinstance(s, (Store, Local, Assign)):
        return _bind(s, taken, budget)
    return s


def _flat(s: Stmt) -> list:
    return list(s.stmts) if isinstance(s, Seq) else [s]


def _roots(s: Stmt) -> tuple:
    if isinstance(s, Store):
        return tuple(s.index) + (s.value,)
    return (s.init,) if isinstance(s, Local) else (s.value,)


def _bind(s: Stmt, taken: set, budget: int) -> Stmt:
    roots = _roots(s)
    # one pass over the DAG: references per node (edges from distinct parents), the nodes
    # reached outside lazy branches, and the tree size of each node
    refs: dict = {}
    unguarded: set = set()
    order: list = []                      # nodes, children before parents
    seen: set = set()
    stack = [(r, False, False) for r in roots]
    for r in roots:
        refs[id(r)] = refs.get(id(r), 0) + 1
    visited_guard: set = set()
    while stack:
        x, guarded, done = stack.pop()
        if done:
            order.append(x)
            continue
        if (id(x), guarded) in visited_guard:
            continue
        visited_guard.add((id(x), guarded))
        if not guarded:
            unguarded.add(id(x))
        first = id(x) not in seen
        seen.add(id(x))
        if first:
            stack.append((x, guarded, True))
        lazy = isinstance(x, Op) and x.name in LAZY_OPS
        for k, kid in enumerate(expr_children(x)):
            if first:
                refs[id(kid)] = refs.get(id(kid), 0) + 1
            stack.append((kid, guarded or (lazy and k > 0), False))
    size: dict = {}
    for x in order:
        size[id(x)] = 1 + sum(size[id(k)] for k in expr_children(x))
    if sum(size[id(r)] for r in roots) <= budget:
        return s
    shared = {id(x) for x in order if refs[id(x)] > 1 and id(x) in unguarded
              and isinstance(x, (Op, Load))}
    new: dict = {}
    pre: list = []
    for x in order:                       # children first, so locals come in use order
        kids = tuple(new[id(k)] for k in expr_children(x))
        y = _rebuild(x, kids) if kids else x
        if id(x) in shared:
            v = fresh("s", taken, y.dtype)
            pre.append(Local(v, y))
            y = v
        new[id(x)] = y
    if isinstance(s, Store):
        n = len(s.index)
        out = Store(s.buffer, tuple(new[id(r)] for r in roots[:n]), new[id(roots[n])])
    elif isinstance(s, Local):
        out = Local(s.var, new[id(roots[0])])
    else:
        out = Assign(s.var, new[id(roots[0])])
    return Seq(pre + [out])


__all__ = ["bind_shared", "TREE_BUDGET"]
