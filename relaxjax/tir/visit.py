"""Generic traversal of loop-level programs: what every pass, analysis and backend that walks
statements and expressions shares, so that none writes its own recursion over ``Seq``,
``For``, ``If`` and the expression nodes.

* ``walk_expr(e)`` / ``walk_stmts(s)`` / ``walk(s)``: pre-order iteration (no recursion:
  fused kernels build deep expressions);
* ``walk_expr_guarded(e)``: the same, telling which nodes only run on some paths (inside a
  lazy ``if_then_else`` branch);
* ``walk_stmts_scoped(s)``: every statement with the loops enclosing it;
* ``map_expr(e, fn)``: rebuild an expression bottom-up, ``fn`` sees every node after its
  operands were rebuilt and returns its replacement;
* ``map_stmt_exprs(s, fn)``: rebuild statements with ``fn`` applied to each expression;
* ``StmtVisitor``: one ``visit_<Node>`` method per statement kind to override (like
  ``ast.NodeVisitor``), for analyses and code emitters.
"""
from __future__ import annotations

from typing import Callable, Iterator

from .nodes import Assign, Expr, For, If, Load, Local, Op, Seq, Stmt, Store


def expr_children(e: Expr) -> tuple:
    """The operands of an expression node (a load's indices, an op's arguments)."""
    if isinstance(e, Op):
        return e.args
    if isinstance(e, Load):
        return e.index
    return ()


def walk_expr(e: Expr) -> Iterator[Expr]:
    """Every node of ``e``, pre-order."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        kids = expr_children(x)
        if kids:
            stack.extend(reversed(kids))


# ops that evaluate their operands after the first (the condition) only when taken
LAZY_OPS = frozenset({"if_then_else"})


def walk_expr_guarded(e: Expr) -> Iterator[tuple[Expr, bool]]:
    """Every node of ``e``, pre-order, with whether it is guarded: inside a branch of a lazy
    op (``LAZY_OPS``), so evaluated only when that branch is taken."""
    stack = [(e, False)]
    while stack:
        x, guarded = stack.pop()
        yield x, guarded
        lazy = isinstance(x, Op) and x.name in LAZY_OPS
        kids = expr_children(x)
        stack.extend((kids[k], guarded or (lazy and k > 0)) for k in reversed(range(len(kids))))


def _rebuild(e: Expr, kids: tuple) -> Expr:
    if isinstance(e, Op):
        return e if all(a is b for a, b in zip(kids, e.args)) else Op(e.name, kids, e.dtype, e.flags)
    if isinstance(e, Load):
        return e if all(a is b for a, b in zip(kids, e.index)) else Load(e.buffer, kids)
    return e


def map_expr(e: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """``e`` rebuilt bottom-up: each node's operands are mapped first, then ``fn(node)``
    gives what replaces the (rebuilt) node.  Nodes left unchanged are shared, and a node
    shared by several parents (FuseTIR reuses the node of a value read several times) is
    mapped once: a DAG stays a DAG, in time linear in its nodes."""
    done: list = []                       # results, in post-order
    memo: dict = {}                       # id(node) -> its result (nodes with operands)
    stack: list = [(e, False)]
    while stack:
        x, expanded = stack.pop()
        kids = expr_children(x)
        if not kids:
            done.append(fn(x))
        elif id(x) in memo:
            done.append(memo[id(x)][1])
        elif not expanded:
            stack.append((x, True))
            stack.extend((k, False) for k in reversed(kids))
        else:
            new = tuple(done[len(done) - len(kids):])
            del done[len(done) - len(kids):]
            r = fn(_rebuild(x, new))
            memo[id(x)] = (x, r)          # (x kept alive: its id stays unique meanwhile)
            done.append(r)
    return done[0]


def map_stmt_exprs(s: Stmt, fn: Callable[[Expr], Expr]) -> Stmt:
    """``s`` rebuilt with ``fn`` applied to each expression of each statement, statements in
    pre-order and each one's expressions in ``stmt_exprs``' order."""
    if isinstance(s, Seq):
        return Seq([map_stmt_exprs(x, fn) for x in s.stmts])
    if isinstance(s, For):
        start, extent = fn(s.start), fn(s.extent)
        return For(s.var, extent, s.kind, map_stmt_exprs(s.body, fn), start)
    if isinstance(s, Store):
        index = tuple(fn(i) for i in s.index)
        return Store(s.buffer, index, fn(s.value))
    if isinstance(s, Local):
        return Local(s.var, fn(s.init))
    if isinstance(s, Assign):
        return Assign(s.var, fn(s.value))
    if isinstance(s, If):
        cond = fn(s.cond)
        then = map_stmt_exprs(s.then, fn)
        return If(cond, then, None if s.else_ is None else map_stmt_exprs(s.else_, fn))
    raise TypeError(f"unknown statement {type(s).__name__}")


def stmt_children(s: Stmt) -> tuple:
    """The statements directly inside ``s``."""
    if isinstance(s, Seq):
        return tuple(s.stmts)
    if isinstance(s, For):
        return (s.body,)
    if isinstance(s, If):
        return (s.then,) if s.else_ is None else (s.then, s.else_)
    return ()


def stmt_exprs(s: Stmt) -> tuple:
    """The expressions directly in ``s`` (not in the statements inside it)."""
    if isinstance(s, For):
        return (s.start, s.extent)
    if isinstance(s, Store):
        return s.index + (s.value,)
    if isinstance(s, Local):
        return (s.init,)
    if isinstance(s, Assign):
        return (s.value,)
    if isinstance(s, If):
        return (s.cond,)
    return ()


def walk_stmts(s: Stmt) -> Iterator[Stmt]:
    """Every statement of ``s``, pre-order."""
    stack = [s]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(stmt_children(x)))


def walk_stmts_scoped(s: Stmt) -> Iterator[tuple[Stmt, tuple[For, ...]]]:
    """Every statement of ``s``, pre-order, with the loops enclosing it (outermost first):
    the loop variables live there."""
    stack: list = [(s, ())]
    while stack:
        x, loops = stack.pop()
        yield x, loops
        inner = loops + (x,) if isinstance(x, For) else loops
        stack.extend((c, inner) for c in reversed(stmt_children(x)))


def walk(s: Stmt) -> Iterator:
    """Every statement and every expression node of ``s``, pre-order."""
    for x in walk_stmts(s):
        yield x
        for e in stmt_exprs(x):
            yield from walk_expr(e)


def loads(s: Stmt) -> Iterator[Load]:
    """Every load in ``s`` (indices included)."""
    return (x for x in walk(s) if isinstance(x, Load))


class StmtVisitor:
    """Dispatches ``visit(s)`` to ``visit_For``, ``visit_Store``, ... (default: visit the
    statements inside).  Subclasses call ``self.generic_visit(s)`` to descend."""

    def visit(self, s: Stmt) -> object:
        return getattr(self, "visit_" + type(s).__name__, self.generic_visit)(s)

    def generic_visit(self, s: Stmt) -> None:
        for c in stmt_children(s):
            self.visit(c)


__all__ = ["expr_children", "walk_expr", "LAZY_OPS", "walk_expr_guarded", "map_expr", "map_stmt_exprs",
           "stmt_children", "stmt_exprs", "walk_stmts", "walk_stmts_scoped", "walk", "loads",
           "StmtVisitor"]
