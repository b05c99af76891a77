"""The BLAS call a real matrix product becomes: Gram products as ``syrk``, transposed
operands as gemm's transpose flags.

``np.cov``, covariance and correlation kernels, kernel matrices and normal equations all
multiply a matrix by its own transpose.  NumPy notices (``matmul`` of an array and its
transposed view calls ``?syrk``) and does half the work; a gemm of the same operands does
all of it, after materializing the transpose.  Legalize asks :func:`gram_operand` whether a
2-D matmul's right operand is the transpose of its left one; then the product becomes a
``blas.?syrk`` library call, which fills the lower triangle only (``i >= j``), and whatever
reads the product reads ``C[max(i, j), min(i, j)]`` (:func:`read_lower_triangle`): the
epilogue a matmul group fuses, or, for a product on its own, a program that mirrors it
(:func:`mirror_program`).

Any other operand that is a transpose of its last two axes (``q @ k.T`` in attention, the
``ct @ W.T`` and ``x.T @ ct`` of a gradient) is read through gemm's transpose flag
(:func:`gemm_call`: ``blas.?gemm_nt``, ``_tn``, ``_tt`` take the untransposed arrays), as
NumPy's matmul of a transposed view does, instead of a program copying it first.  On a
backend that reads strided operands (the LLVM backend: CBLAS's leading dimensions and
per-product pointers), an operand that moves batch axes or rows but keeps its last axis
last (``swapaxes(k, 1, 2)`` of keys stored ``(b, S, heads, hd)``) is read in place too
(:func:`rows_view`).  In every case the transpose, now unused, goes with dead-code
elimination.
"""
from __future__ import annotations

import numpy as np

from ..ir import Binding, TensorType, Var
from .. import tir
from ..tir import Buffer, Load, PrimFunc, Store, from_sympy, op
from ..tir.visit import map_expr, map_stmt_exprs
from .lowering import default_loop_kinds

# (dtype, which operand is transposed) -> the library function: "nt" is A @ A.T, "tn" A.T @ A
SYRK = {(np.dtype("float32"), "nt"): "blas.ssyrk", (np.dtype("float64"), "nt"): "blas.dsyrk",
        (np.dtype("float32"), "tn"): "blas.ssyrk_tn", (np.dtype("float64"), "tn"): "blas.dsyrk_tn"}


# (dtype, which operands are transposed) -> the gemm reading them through its flags
GEMM_T = {(np.dtype(d), form): f"blas.{letter}gemm_{form}"
          for d, letter in (("float32", "s"), ("float64", "d")) for form in ("nt", "tn", "tt")}


def swaps_last_two_axes(b: Binding) -> bool:
    """Whether ``b`` is a transpose of the last two axes (what gemm's flags read)."""
    if b.kind != "primitive" or b.callee.name != "transpose":
        return False
    n = len(b.params["perm"])
    return n >= 2 and tuple(b.params["perm"]) == tuple(range(n - 2)) + (n - 1, n - 2)


def _transpose_of(defs: dict, v) -> Var | None:
    """The value ``v`` is ``v``'s last two axes swapped of, if ``defs`` says it is one."""
    t = defs.get(v)
    if t is None or not swaps_last_two_axes(t) or not isinstance(t.args[0], Var):
        return None
    return t.args[0]


def gram_operand(mm: Binding, args: list, defs: dict) -> tuple[Var, str] | None:
    """``(A, "nt")`` when the matmul ``mm`` (called with ``args`` in the enclosing function,
    whose bindings ``defs`` maps its values to) computes ``A @ A.T`` of a 2-D ``A`` with a
    BLAS dtype, ``(A, "tn")`` for ``A.T @ A``; else None."""
    a, b = args
    dtype = mm.outvars[0].type.dtype
    if not (isinstance(a, Var) and isinstance(b, Var)) or a.type.ndim != 2 or b.type.ndim != 2 or \
            (dtype, "nt") not in SYRK or a.type.dtype != dtype or b.type.dtype != dtype:
        return None
    if _transpose_of(defs, b) is a:
        return a, "nt"
    if _transpose_of(defs, a) is b:
        return b, "tn"
    return None


def rows_view(defs: dict, v) -> tuple | None:
    """``(x, perm)`` when ``v`` is ``transpose(x, perm)`` keeping ``x``'s last axis last and
    moving others (batch axes, rows): a view BLAS reads in place, each matrix's rows
    ``stride(perm[-2])`` elements apart in ``x``."""
    t = defs.get(v)
    if t is None or t.kind != "primitive" or t.callee.name != "transpose" or not isinstance(t.args[0], Var):
        return None
    perm = tuple(t.params["perm"])
    n = len(perm)
    if n < 2 or perm[-1] != n - 1 or perm == tuple(range(n)):
        return None
    return t.args[0], perm


def gemm_call(mm: Binding, args: list, defs: dict, gemm: str, views: bool = False) -> tuple[str, list, dict]:
    """The gemm library function, operands and parameters of the real matmul ``mm``
    (called with ``args``; ``defs`` maps the enclosing function's values to their
    bindings) that is not a Gram product: ``gemm`` itself, or its ``_nt``/``_tn``/``_tt``
    form on the arrays an operand transposes (last two axes swapped).  With ``views`` (a
    backend that reads them), an operand that is, or swaps the last two axes of, a
    ``rows_view`` is passed as that view's source with ``views=(perm of A, perm of B)``
    (None for an operand passed as it is): no program copies it."""
    dtype = mm.outvars[0].type.dtype
    flags, operands, perms = [], [], []
    for v in args:
        swapped = _transpose_of(defs, v) if isinstance(v, Var) else None
        flags.append("t" if swapped is not None else "n")
        v = swapped if swapped is not None else v
        view = rows_view(defs, v) if views and isinstance(v, Var) else None
        operands.append(view[0] if view else v)
        perms.append(view[1] if view else None)
    form = "".join(flags)
    params = {"views": tuple(perms)} if any(p is not None for p in perms) else {}
    return (gemm if form == "nn" else GEMM_T[dtype, form]), operands, params


def read_lower_triangle(f: PrimFunc, buf: Buffer) -> None:
    """Make every load of the square 2-D ``buf`` in ``f`` read its lower triangle (in place):
    ``buf[i, j]`` becomes ``buf[max(i, j), min(i, j)]``."""
    def fix(e):
        if isinstance(e, Load) and e.buffer is buf:
            i, j = e.index
            return Load(buf, (op("max", i, j), op("min", i, j)))
        return e

    f.body = map_stmt_exprs(f.body, lambda e: map_expr(e, fix))


def mirror_program(t: TensorType, name: str) -> PrimFunc:
    """``out[i, j] = c[max(i, j), min(i, j)]``: the full product from syrk's triangle."""
    c = Buffer("c", tuple(t.shape), t.dtype)
    out = Buffer("out", tuple(t.shape), t.dtype)
    taken = {"c", "out"} | set(tir.dim_vars([c]))
    extents = [from_sympy(d) for d in t.shape]
    body = tir.loop_nest(extents, lambda idx: Store(out, tuple(idx), c[tuple(idx)]),
                         default_loop_kinds(2), taken)
    f = PrimFunc(name, [c, out], 1, tir.dim_vars([c, out]), body)
    read_lower_triangle(f, c)
    return f
