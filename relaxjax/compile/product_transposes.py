"""A transpose that only matrix products read, split so the products read it through gemm's
transpose flag and the copy left moves whole rows.

``qh @ swapaxes(kh, -1, -2)`` with ``kh = swapaxes(k, 1, 2)`` (attention's scores over keys
stored ``(b, S, heads, hd)``; ``einsum("bqhd,bkhd->bhqk")``) is, after Canonicalize merges
the two, one transpose ``(0, 2, 3, 1)`` of ``k``: a copy whose innermost axis is ``k``'s
second, written ``heads * hd`` elements apart (4 KiB for 6 heads of 64 floats: every store
a new page).  Gemm reads a matrix whose last two axes are swapped through its transpose flag
(``blas_calls.gemm_call``; ``FuseOps`` keeps such a swap out of its producer's program), so
``ProductTransposes`` writes the transpose as ``perm'`` -- ``perm`` with its last two entries
swapped -- followed by that swap, wherever ``perm'`` keeps ``k``'s last axis last: what
remains, ``(0, 2, 1, 3)`` here, is a view of rows of ``hd`` contiguous elements, which the
LLVM backend's products read in place (``blas_calls.rows_view``) and other backends copy
row by row; nothing remains where ``perm'`` is the identity (already the swap).  Only transposes every reader of
which is a float matrix product are split; Canonicalize would merge the two again, so the
pass runs after it, before ``FuseOps``.
"""
from __future__ import annotations

from ..core import PRIMITIVES
from ..ir import Binding, Function, TensorType, Var
from .lowering import BLAS
from .passes import Pass, rewrite_functions


def _only_products_read(f: Function, users: list) -> bool:
    return bool(users) and all(
        u < len(f.bindings) and f.bindings[u].kind == "primitive" and f.bindings[u].callee.name == "matmul"
        and f.bindings[u].outvars[0].type.dtype in BLAS for u in users)


def _split(b: Binding) -> list | None:
    """``transpose(x, perm')`` then the last two axes swapped, for ``b`` = ``transpose(x,
    perm)`` where ``perm'`` keeps ``x``'s last axis last and is not the identity; else None."""
    perm = tuple(b.params["perm"])
    n = len(perm)
    if n < 2 or not isinstance(b.args[0], Var):
        return None
    first = perm[:-2] + (perm[-1], perm[-2])
    if first[-1] != n - 1 or first == tuple(range(n)):
        return None
    x, out = b.args[0], b.outvars[0]
    rows = Var(TensorType(tuple(x.type.shape[a] for a in first), x.type.dtype))
    swap = tuple(range(n - 2)) + (n - 1, n - 2)
    return [Binding([rows], PRIMITIVES["transpose"], [x], {"perm": first}, b.source),
            Binding([out], PRIMITIVES["transpose"], [rows], {"perm": swap}, b.source)]


def _rewrite(f: Function, programs: dict) -> Function:
    bindings, changed, uses = [], False, None
    for b in f.bindings:
        split = None
        if b.kind == "primitive" and b.callee.name == "transpose":
            uses = f.uses() if uses is None else uses
            if _only_products_read(f, uses.get(b.outvars[0], [])):
                split = _split(b)
        bindings += split or [b]
        changed |= split is not None
    if not changed:
        return f
    return Function(f.name, f.params, f.param_names, bindings, f.results, f.bounds, f.guards, f.attrs)


product_transposes = Pass("ProductTransposes", lambda module: rewrite_functions(module, _rewrite))
