"""Analysis of loop-level programs, fed back to the graph level (the Relax paper's
cross-level feedback): ``classify_primfunc`` derives a program's op pattern from its loops,
so FuseOps treats any ``call_tir`` -- generated or written by a user -- by the same rules as
graph primitives, and ``inline_primfunc`` gives a perfect loop nest's element expression
so FuseTIR can inline it like a primitive's compute rule.  ``mark_loop_kinds`` decides which
loops of a program are independent (used for user-written kernels, ``relaxjax.pykernel``)."""
from __future__ import annotations

from typing import Callable

from .nodes import (Assign, Const, Expr, For, Load, Local, Op, PrimFunc, Seq, Stmt, Store, Var,
                    expr_str, from_sympy)
from .visit import loads, map_expr, stmt_exprs, walk, walk_expr, walk_stmts, walk_stmts_scoped


def perfect_nest(f: PrimFunc) -> tuple[list[Var], Store] | None:
    """``(loop vars, store)`` when ``f`` is ``for i...: out[i...] = expr`` over its single
    output's shape with an expression that only loads inputs; else None."""
    if f.n_outputs != 1:
        return None
    s, loops = f.body, []
    while True:
        if isinstance(s, Seq) and len(s.stmts) == 1:
            s = s.stmts[0]
        elif isinstance(s, For) and s.kind != "reduction" and isinstance(s.start, Const) \
                and s.start.value == 0:
            loops.append(s)
            s = s.body
        else:
            break
    out = f.outputs[0]
    if not isinstance(s, Store) or s.buffer is not out or len(loops) != len(out.shape):
        return None
    if [expr_str(i) for i in s.index] != [lp.var.name for lp in loops]:
        return None
    if [expr_str(lp.extent) for lp in loops] != [expr_str(from_sympy(d)) for d in out.shape]:
        return None
    inputs = {id(b) for b in f.inputs}
    ok = all(id(x.buffer) in inputs for x in loads(s))        # its index is the loop vars
    return ([lp.var for lp in loops], s) if ok else None


def _has_reduction(s) -> bool:
    return any(isinstance(x, For) and x.kind == "reduction" for x in walk_stmts(s))


def classify_primfunc(f: PrimFunc) -> str:
    """"elementwise" (every load at the store's own index), "injective" (a perfect nest
    whose loads are re-indexed), "reduction" (has an accumulator loop) or "opaque"."""
    nest = perfect_nest(f)
    if nest is not None:
        loop_vars, store = nest
        names = [v.name for v in loop_vars]
        out_shape = [expr_str(from_sympy(d)) for d in store.buffer.shape]
        same = all([expr_str(i) for i in x.index] == names and
                   [expr_str(from_sympy(d)) for d in x.buffer.shape] == out_shape
                   for x in loads(store))
        return "elementwise" if same else "injective"
    return "reduction" if _has_reduction(f.body) else "opaque"


def inline_primfunc(f: PrimFunc, idx: list, reads: list[Callable], dims: dict) -> Expr:
    """The element ``idx`` of ``f``'s output, with input ``k`` read through ``reads[k]`` and
    the program's dim variables replaced by ``dims[name]`` (the caller's expressions)."""
    nest = perfect_nest(f)
    if nest is None:
        raise ValueError(f"{f.name} is not a perfect loop nest")
    loop_vars, store = nest
    env = {v.name: i for v, i in zip(loop_vars, idx)}
    pos = {id(b): k for k, b in enumerate(f.inputs)}

    def sub(e):
        if isinstance(e, Var):
            if e.name in env:
                return env[e.name]
            return dims.get(e.name, e)          # a dim the caller has under the same name
        if isinstance(e, Load):                 # its indices are substituted already
            return reads[pos[id(e.buffer)]](list(e.index))
        return e
    return map_expr(store.value, sub)


# ---------------------------------------------------------------------------------------
# Loop independence
# ---------------------------------------------------------------------------------------

def loop_is_independent(loop: For) -> bool:
    """Iterations of ``loop`` can run in any order (or at once): no local scalar declared
    outside the loop is assigned inside it, and for every buffer the loop writes there is
    an axis that every access to that buffer inside the loop indexes with the loop
    variable itself -- so each iteration reads and writes its own slice."""
    accesses: dict = {}                   # buffer id -> the indices it is accessed at
    declared, assigned, written = set(), set(), set()
    for x in walk(loop.body):
        if isinstance(x, (Load, Store)):
            accesses.setdefault(id(x.buffer), []).append(x.index)
            if isinstance(x, Store):
                written.add(id(x.buffer))
        elif isinstance(x, Local):
            declared.add(x.var.name)
        elif isinstance(x, Assign):
            assigned.add(x.var.name)
    if assigned - declared:
        return False
    v = loop.var.name
    for b in written:
        idxs = accesses[b]
        rank = len(idxs[0])
        if not any(all(isinstance(ix[k], Var) and ix[k].name == v for ix in idxs)
                   for k in range(rank)):
            return False
    return True


def _has_loop(s) -> bool:
    return any(isinstance(x, For) for x in walk_stmts(s))


def mark_loop_kinds(body: Stmt) -> Stmt:
    """Set the kind of every serial loop in ``body`` (in place; returns ``body``): an
    independent loop (``loop_is_independent``, or said to be: ``For.independent``) is
    "parallel" when no loop encloses it,
    else "vectorized" when it is innermost; every other loop stays "serial"."""
    for s, enclosing in walk_stmts_scoped(body):
        if isinstance(s, For) and s.kind == "serial" and (s.independent or loop_is_independent(s)):
            if not enclosing:
                s.kind = "parallel"
            elif not _has_loop(s.body):
                s.kind = "vectorized"
    return body


def inplace_input(f: PrimFunc) -> int | None:
    """The position of an input that ``f`` may update in place (its output then takes the
    input's storage, when the caller's input dies at the call), or None.

    The input must have the output's shape and dtype, and the program must be an *update*
    of it: it passes ``a[i]`` through to ``out[i]`` (as the stored value or a branch of a
    select, as ``update_slice`` and ``scatter``'s copy lower), and it reads ``a`` only at
    the element the same iteration is about to write -- each load ``a[i...]`` indexed by
    distinct loop variables that cover its enclosing loops, every store to ``out`` in that
    loop body at the same index, and no store to ``out`` before it in program order.  A
    later phase may then read and write ``out`` freely (``scatter``'s serial loop)."""
    found = _passed_through(f, 0)
    return None if found is None else found[0]


def growing_input(f: PrimFunc) -> tuple[int, int] | None:
    """``(position, axis)`` of an input that ``f``'s output extends along one axis, or None:
    the output's shape is the input's but for ``axis``, and the program passes the input
    through as an update does (``inplace_input``'s conditions: a concatenation onto it,
    ``concatenate([cache, new], axis)``).  The output may then take the input's memory
    where that memory holds the longer array -- the dims before ``axis`` are 1 and the block
    has room after it, which the LLVM runtime decides per call -- and the program stores
    only the new part (``mask_bounds.update_region``): a cache that grows by a row per call
    is not copied every call."""
    found = _passed_through(f, 1)
    return None if found is None else (found[0], found[1][0])


def _passed_through(f: PrimFunc, differing: int) -> tuple[int, list] | None:
    """(position, the axes where its shape differs) of the first input of the output's
    dtype and rank whose shape differs from the output's in ``differing`` axes and that
    ``f`` passes through to the output as an update (``_overwritable``), or None."""
    if f.n_outputs != 1:
        return None
    out = f.outputs[0]
    shape = [expr_str(from_sympy(d)) for d in out.shape]
    for k, a in enumerate(f.inputs):
        if a.dtype != out.dtype or len(a.shape) != len(shape):
            continue
        differ = [i for i, d in enumerate(a.shape) if expr_str(from_sympy(d)) != shape[i]]
        if len(differ) == differing and _overwritable(f.body, a, out):
            return k, differ
    return None


def _index_key(index: tuple) -> tuple | None:
    """The names of an index made of distinct loop variables and integer constants (the 0 of
    a unit axis, whose loop a nest drops), else None."""
    if not all(isinstance(i, Var) or isinstance(i, Const) and i.dtype.kind in "iu" for i in index):
        return None
    names = tuple(i.name if isinstance(i, Var) else ("const", int(i.value)) for i in index)
    loop_vars = [n for n in names if isinstance(n, str)]
    return names if len(set(loop_vars)) == len(loop_vars) else None


def _overwritable(body: Stmt, a, out) -> bool:
    events = []                   # ("load" | "store", index key, innermost loop), program order
    passes_through = False
    for s, loops in walk_stmts_scoped(body):
        inner = loops[-1] if loops else None
        for e in stmt_exprs(s):
            for x in walk_expr(e):
                if isinstance(x, Load) and x.buffer is a:
                    key = _index_key(x.index)
                    if key is None or not {lp.var.name for lp in loops} <= set(key):
                        return False
                    events.append(("load", key, inner))
                elif isinstance(x, Op) and x.name in ("if_then_else", "select"):
                    passes_through |= any(isinstance(y, Load) and y.buffer is a for y in x.args[1:])
        if isinstance(s, Store) and s.buffer is out:
            events.append(("store", _index_key(s.index), inner))
            passes_through |= isinstance(s.value, Load) and s.value.buffer is a
    # the store keys of each loop body, gathered once: a scan of all events per load is
    # quadratic in a long straight-line body (an unrolled loop of thousands of loads)
    store_keys: dict = {}
    for kind, key, inner in events:
        if kind == "store":
            store_keys.setdefault(id(inner), set()).add(key)
    stored = False
    for kind, key, inner in events:
        if kind == "store":
            stored = True
            continue
        if stored:                # a store to ``out`` came first: it may have overwritten ``a``
            return False
        if store_keys.get(id(inner), set()) != {key}:
            return False
    return passes_through and any(kind == "load" for kind, _, _ in events)
