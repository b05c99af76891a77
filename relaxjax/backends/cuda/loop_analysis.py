"""Analyses of loop nests for the CUDA code generator: which loops map to the grid, which
statements the threads of a block can run together, which reductions combine in two
stages, and whether a loop walks memory contiguously."""
from __future__ import annotations

from ...tir import INDEX, Assign, Const, For, If, Load, Local, Op, Seq, Store, Var, op
from ...tir.visit import stmt_exprs, walk_expr, walk_stmts

# reduction combiners: tir op name -> (functor for floats/bool, functor for integers)
COMBINE = {"add": ("rj_add_op", "rj_iadd_op"), "mul": ("rj_mul_op", "rj_imul_op"),
            "max": ("rj_max_op", "rj_max_op"), "min": ("rj_min_op", "rj_min_op"),
            "and": ("rj_and_op", "rj_and_op"), "or": ("rj_or_op", "rj_or_op"),
            "xor": ("rj_xor_op", "rj_xor_op")}


def trip_count(loop: For):
    return op("max", loop.extent - loop.start, Const(0, INDEX))


def leading_loops(s) -> tuple:
    """The parallel/vectorized loops a phase's grid flattens, outermost first, and the body
    inside them.  A loop whose bounds read an enclosing loop's variable (a variable loop:
    ``for i in range(off[s], off[s + 1])``) has no one trip count for the grid: it stays
    in the body, run per row."""
    loops = []
    while isinstance(s, For) and s.kind in ("parallel", "vectorized"):
        outer = {lp.var.name for lp in loops}
        if any(isinstance(x, Var) and x.name in outer for e in (s.start, s.extent) for x in walk_expr(e)):
            break
        loops.append(s)
        s = s.body
    return loops, s


def has_loop(s) -> bool:
    return any(isinstance(x, For) for x in walk_stmts(s))


def has_store(s) -> bool:
    return any(isinstance(x, Store) for x in walk_stmts(s))


def all_exprs(s):
    """Every expression of ``s`` (not recursing into sub-expressions)."""
    for x in walk_stmts(s):
        yield from stmt_exprs(x)


def reads(s, name: str) -> int:
    return sum(isinstance(x, Var) and x.name == name for e in all_exprs(s) for x in walk_expr(e))


def declared(s) -> set:
    return {x.var.name for x in walk_stmts(s) if isinstance(x, Local)} | \
        {x.var.name for x in walk_stmts(s) if isinstance(x, For)}


def combined_accumulators(loop: For) -> dict | None:
    """The accumulators a reduction loop only combines into: {name: (op, dtype)}; None when
    an outer local is assigned any other way (or read apart from its combining)."""
    inner = declared(loop.body)
    accs: dict = {}
    assigns = [x for x in walk_stmts(loop.body) if isinstance(x, Assign) and x.var.name not in inner]
    for a in assigns:
        v = a.value
        if not (isinstance(v, Op) and v.name in COMBINE and len(v.args) == 2):
            return None
        x, y = v.args
        acc = x if isinstance(x, Var) and x.name == a.var.name else y
        other = y if acc is x else x
        if not (isinstance(acc, Var) and acc.name == a.var.name) or reads_expr(other, a.var.name):
            return None
        if accs.setdefault(a.var.name, (v.name, a.var.dtype))[0] != v.name:
            return None
    for name in accs:
        n_assign = sum(1 for a in assigns if a.var.name == name)
        if reads(loop.body, name) != n_assign:
            return None
    return accs


def reads_expr(e, name: str) -> bool:
    return any(isinstance(x, Var) and x.name == name for x in walk_expr(e))


def full_reduction(s):
    """``(prefix, loop, rest)`` when ``s`` is local set-up, one combining reduction nest and
    loop-free or shareable statements after it: a reduction over everything, done in two
    stages.  None otherwise."""
    stmts = s.stmts if isinstance(s, Seq) else [s]
    k = next((i for i, x in enumerate(stmts) if isinstance(x, For)), None)
    if k is None or stmts[k].kind != "reduction" or not shareable(s):
        return None
    prefix, loop, rest = stmts[:k], stmts[k], stmts[k + 1:]
    if not all(isinstance(x, (Local, Assign)) for x in prefix) or not combined_accumulators(loop) or \
            any(isinstance(x, For) and x.kind == "reduction" for r in rest for x in walk_stmts(r)):
        return None
    return prefix, loop, rest


def shareable(s) -> bool:
    """Can the threads of a block run ``s`` together (see ``_Emitter.shared``)?"""
    if isinstance(s, Seq):
        return all(shareable(x) for x in s.stmts)
    if isinstance(s, (Local, Assign, Store)):
        return True
    if isinstance(s, If):
        if has_loop(s):
            return False
        assigns = any(isinstance(x, (Assign, Local)) for x in walk_stmts(s))
        return not (assigns and has_store(s))
    if isinstance(s, For) and s.kind in ("parallel", "vectorized"):
        inner = declared(s.body)
        return not any(isinstance(x, Assign) and x.var.name not in inner for x in walk_stmts(s.body))
    if isinstance(s, For) and s.kind == "reduction":
        return combined_accumulators(s) is not None
    return False


def contiguous_split(s) -> bool:
    """Does a loop split across the block walk the last (contiguous) axis of some buffer?
    Otherwise neighbouring threads would touch far-apart addresses: one thread per row is
    better."""
    for x in walk_stmts(s):
        if isinstance(x, For):
            names = {l.var.name for l in walk_stmts(x) if isinstance(l, For)}
            for e in all_exprs(x.body):
                for sub in walk_expr(e):
                    if isinstance(sub, Load) and sub.index and \
                            any(reads_expr(sub.index[-1], n) for n in names):
                        return True
            for st in walk_stmts(x.body):
                if isinstance(st, Store) and st.index and any(reads_expr(st.index[-1], n) for n in names):
                    return True
    return False
