"""Analysis of loop-level programs, fed back to the graph level (the Relax paper's
cross-level feedback): ``classify_primfunc`` derives a program's op pattern from its loops,
so FuseOps treats any ``call_tir`` -- generated or written by a user -- by the same rules as
graph primitives, and ``inline_primfunc`` gives a perfect loop nest's element expression
so FuseTIR can inline it like a primitive's compute rule."""
from __future__ import annotations

from typing import Callable

from .tir import Const, Expr, For, Load, Op, PrimFunc, Seq, Store, Var, expr_str, from_sympy


def perfect_nest(f: PrimFunc):
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
    ok = True

    def visit(e):
        nonlocal ok
        if isinstance(e, Load):
            ok &= id(e.buffer) in inputs
            for i in e.index:
                visit(i)
        elif isinstance(e, Op):
            for a in e.args:
                visit(a)
    visit(s.value)
    return ([lp.var for lp in loops], s) if ok else None


def _has_reduction(s) -> bool:
    if isinstance(s, For):
        return s.kind == "reduction" or _has_reduction(s.body)
    if isinstance(s, Seq):
        return any(_has_reduction(x) for x in s.stmts)
    return False


def classify_primfunc(f: PrimFunc) -> str:
    """"elementwise" (every load at the store's own index), "injective" (a perfect nest
    whose loads are re-indexed), "reduction" (has an accumulator loop) or "opaque"."""
    nest = perfect_nest(f)
    if nest is not None:
        loop_vars, store = nest
        names = [v.name for v in loop_vars]
        same = True

        def visit(e):
            nonlocal same
            if isinstance(e, Load):
                same &= [expr_str(i) for i in e.index] == names and \
                    [expr_str(from_sympy(d)) for d in e.buffer.shape] == \
                    [expr_str(from_sympy(d)) for d in store.buffer.shape]
            elif isinstance(e, Op):
                for a in e.args:
                    visit(a)
        visit(store.value)
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
            return dims[e.name]
        if isinstance(e, Load):
            return reads[pos[id(e.buffer)]]([sub(i) for i in e.index])
        if isinstance(e, Op):
            return Op(e.name, tuple(sub(a) for a in e.args), e.dtype, e.flags)
        return e
    return sub(store.value)
