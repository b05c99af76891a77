"""Two matrix-vector products of one matrix, ``A @ x`` and ``y @ A``, in one pass over ``A``.

Both products stream the whole matrix from memory and do two flops per element read, so
each runs at memory bandwidth; computed apart (two BLAS gemv calls, as NumPy does), ``A``
is read twice.  BiCG's ``s = r @ A, q = A @ p`` and polybench's mvt ``x1 + A @ y1,
x2 + y2 @ A`` do exactly this.  ``MatvecPairs`` finds such a pair (neither product reading
the other's result) and computes both in one loop-level program: row blocks in parallel,
each row's dot product with ``x`` and its ``y[i]``-scaled update of the block's partial
``y @ A`` done while the row is in cache; a ``reduce_sum`` over the blocks' partials
(fused and vectorized like any reduction) finishes ``y @ A``.  When the second product's
vector is the first's result (``(A @ x) @ A``: polybench's atax, ``A^T A x``), each group of
rows is dotted with ``x`` and then, while still in cache, added to the partial row scaled by
those dot products: ``A`` is read from memory once where two gemvs read it twice.
"""
from __future__ import annotations

import numpy as np

from .. import tir
from ..ir import Binding, Function, TensorType, Var
from ..lax.reduction import reduce_sum
from ..tir import Assign, Buffer, For, Local, PrimFunc, Seq, Store, Var as TVar, from_sympy
from .passes import Pass, new_name, rewrite_functions

BLOCKS = 32            # row blocks: partial results are BLOCKS x n, a few percent of A's bytes
ROWS = 4               # rows per pass over the columns
_DTYPES = (np.dtype("float32"), np.dtype("float64"))


def _matvec(b: Binding):
    """``(A, "right")`` for ``A @ x`` with x of shape (n, 1), ``(A, "left")`` for ``y @ A``
    with y of shape (1, m); A 2-D, every operand the product's float dtype."""
    if b.kind != "primitive" or b.callee.name != "matmul" or len(b.args) != 2:
        return None
    a, c = b.args
    if not (isinstance(a, Var) and isinstance(c, Var)) or a.type.ndim != 2 or c.type.ndim != 2:
        return None
    dtype = b.outvars[0].type.dtype
    if dtype not in _DTYPES or a.type.dtype != dtype or c.type.dtype != dtype:
        return None
    if c.type.shape[1] == 1 and a.type.shape[0] != 1:
        return a, "right"
    if a.type.shape[0] == 1 and c.type.shape[1] != 1:
        return c, "left"
    return None


def _reads(b: Binding, values: set) -> bool:
    return any(isinstance(a, Var) and a in values for a in b.args)


def _dependents(bindings: list, start: int) -> set:
    """Values computed from binding ``start``'s results."""
    tainted = set(bindings[start].outvars)
    for b in bindings[start + 1:]:
        if _reads(b, tainted):
            tainted.update(b.outvars)
    return tainted


def pair_program(A: TensorType, name: str, chained: bool = False) -> PrimFunc:
    """``(a, x, y) -> (a @ x, partial)``: ``partial[k, 0, :]`` is ``y @ a`` over row block k.
    Rows go ``ROWS`` at a time through one loop over the columns (their dot products with
    ``x`` and their update of the partial row), so ``a`` is read once and the partial row
    once per ``ROWS`` rows; the rows a block has beyond a multiple of ``ROWS`` one by one.

    ``chained`` (``(a @ x) @ a``, polybench's atax, ``A^T A x``): ``(a, x) -> (a @ x,
    partial)`` with ``y = a @ x``: each group of rows is dotted with ``x`` in one pass over
    the columns, then a second pass, over the same rows while they are in cache, adds
    them scaled by their dot products to the partial row."""
    m, n = A.shape
    dt = A.dtype
    a, x, y = Buffer("a", (m, n), dt), Buffer("x", (n, 1), dt), Buffer("y", (1, m), dt)
    ax, part = Buffer("ax", (m, 1), dt), Buffer("part", (BLOCKS, 1, n), dt)
    M, N = from_sympy(m), from_sympy(n)
    zero, z = tir.Const(0, dt), tir.Const(0, tir.INDEX)
    k, q, i, j, j2 = (TVar(s, tir.INDEX) for s in ("k", "q", "i", "j", "j2"))
    rows = (M + (BLOCKS - 1)) // BLOCKS
    first, last = k * rows, tir.op("min", (k + 1) * rows, M)
    quads = tir.op("max", last - first, tir.Const(0, tir.INDEX)) // ROWS   # blocks past m: none

    def rows_step(r0, count: int, jv):
        """Rows r0 .. r0 + count - 1: one pass over the columns (two when chained)."""
        accs = [TVar(f"acc{r}", dt) for r in range(count)]
        update = zero
        col = []
        for r, acc in enumerate(accs):
            v = a[r0 + r, jv]
            col.append(Assign(acc, tir.op("add", acc, v * x[jv, 0], flags=("reassoc",))))
            update = update + (acc if chained else y[0, r0 + r]) * v
        add = Store(part, (k, z, jv), part[k, 0, jv] + update)
        if chained:         # the dot products first, then the update with them
            loops = [For(jv, N, "reduction", Seq(col)), For(jv, N, "vectorized", add)]
        else:
            loops = [For(jv, N, "reduction", Seq(col + [add]))]
        return Seq([Local(acc, zero) for acc in accs] + loops +
                   [Store(ax, (r0 + r, z), acc) for r, acc in enumerate(accs)])

    body = For(k, tir.Const(BLOCKS, tir.INDEX), "parallel", Seq([
        For(j2, N, "vectorized", Store(part, (k, z, j2), zero)),
        For(q, quads, "serial", rows_step(first + q * ROWS, ROWS, j)),
        For(i, last, "serial", rows_step(i, 1, j), first + quads * ROWS),
    ]))
    params = [a, x, ax, part] if chained else [a, x, y, ax, part]
    return PrimFunc(name, params, 2, tir.dim_vars(params), body)


def _reshaped_from(bindings: list, v, src) -> bool:
    """Whether value ``v`` is ``src`` through reshapes alone (the (m, 1) product as a row)."""
    producer = {o: b for b in bindings for o in b.outvars}
    while v is not src:
        b = producer.get(v)
        if b is None or b.kind != "primitive" or b.callee.name != "reshape":
            return False
        v = b.args[0]
    return True


def _pair_calls(A, right: Binding, left: Binding, programs: dict, chained: bool, source) -> tuple:
    """The pair program's call (computing ``right``'s ``A @ x`` and partial rows of
    ``left``'s ``y @ A``; ``y`` is ``A @ x`` itself when ``chained``) and the sum of the
    partial rows."""
    part = Var(TensorType((BLOCKS, 1, A.type.shape[1]), A.type.dtype), "part")
    name = new_name(programs, "matvec_chain" if chained else "matvec_pair")
    prog = programs[name] = pair_program(A.type, name, chained)
    args = [A, right.args[1]] + ([] if chained else [left.args[0]])
    return (Binding([right.outvars[0], part], prog, args, {}, source),
            Binding([left.outvars[0]], reduce_sum, [part], {"axes": (0,)}, source))


def _pair_up(fn: Function, programs: dict) -> Function:
    bindings = list(fn.bindings)
    done = False
    while not done:
        done = True
        seen: dict = {}          # (id(A), side) -> binding index
        for idx, b in enumerate(bindings):
            mv = _matvec(b)
            if mv is None:
                continue
            A, side = mv
            other = seen.get((id(A), "left" if side == "right" else "right"))
            if other is None:
                seen.setdefault((id(A), side), idx)
                continue
            first = bindings[other]
            tainted = _dependents(bindings, other)
            if _reads(b, tainted):
                if side == "left" and _reshaped_from(bindings, b.args[0], first.outvars[0]):
                    # (A @ x) @ A: the pair where the first product was, its sum at the second
                    call, total = _pair_calls(A, first, b, programs, True, b.source)
                    bindings = bindings[:other] + [call] + bindings[other + 1:idx] + [total] + \
                        bindings[idx + 1:]
                    done = False
                    break
                continue                   # the later product reads the earlier one's result
            # what reads the earlier result moves after the pair; the rest stays before it
            between = bindings[other + 1:idx]
            later = [c for c in between if _reads(c, tainted)]
            before = [c for c in between if not _reads(c, tainted)]
            right, left = (first, b) if side == "left" else (b, first)
            call, total = _pair_calls(A, right, left, programs, False, b.source)
            bindings = bindings[:other] + before + [call, total] + later + bindings[idx + 1:]
            done = False
            break
    if len(bindings) == len(fn.bindings) and all(p is q for p, q in zip(bindings, fn.bindings)):
        return fn
    return Function(fn.name, fn.params, fn.param_names, bindings, fn.results, fn.bounds,
                    fn.guards, fn.attrs)


matvec_pairs = Pass("MatvecPairs", lambda module: rewrite_functions(module, _pair_up))
