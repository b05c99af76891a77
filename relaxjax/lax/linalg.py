"""matmul with NumPy semantics for operands of rank >= 2 (batch dims broadcast)."""
from __future__ import annotations

import numpy as np

from ..core import PRIMITIVES, Primitive, Tracer, current_trace
from ..errors import ShapeError
from ..ir import Binding, TensorType, Var
from ..library import LibraryFunc
from ..shapes import dim_str
from .ad_util import unbroadcast
from . import batching
from .util import broadcast_shapes, same_dtype


def _matmul_shape(env, a, b):
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError(f"matmul primitive needs rank >= 2 operands, got {a} and {b}")
    env.require_eq(a.shape[-1], b.shape[-2],
                   f"matmul {a} @ {b}: contraction dims differ ({dim_str(a.shape[-1])} vs {dim_str(b.shape[-2])})")
    batch = broadcast_shapes(env, [a.shape[:-2], b.shape[:-2]], "matmul batch dims")
    return batch + (a.shape[-2], b.shape[-1])


def _matmul_dtype(a, b):
    d = same_dtype(a, b, what="matmul")
    if d == np.dtype(bool):
        raise TypeError("matmul of bool arrays is not supported; cast to an integer dtype first")
    return d


# complex matmul on packed operands (..., M, K, 2) @ (..., K, N, 2): BLAS's cgemm / zgemm
COMPLEX_GEMM = {np.dtype("float32"): "blas.cgemm", np.dtype("float64"): "blas.zgemm"}


def _matmul_complex(a, b):
    """One complex gemm on the packed operands (NumPy calls zgemm too): it reads each
    operand once, where four real products of the parts read each twice and write four
    products for a fifth pass to combine."""
    ctx = current_trace()
    x, y = ctx.atom(a), ctx.atom(b)
    shape = matmul.abstract_eval(ctx.env, [TensorType(x.type.shape[:-1], x.type.dtype),
                                           TensorType(y.type.shape[:-1], y.type.dtype)], {})[0].shape
    out = Var(TensorType(tuple(shape) + (2,), x.type.dtype))
    ctx.bindings.append(Binding([out], LibraryFunc(COMPLEX_GEMM[x.type.dtype]), [x, y], {}))
    return Tracer(ctx, out)


_matmul_complex.takes_packed = True


matmul = Primitive("matmul", shape_rule=_matmul_shape, dtype_rule=_matmul_dtype,
                   impl=lambda a, b: np.matmul(a, b), kind="output_fusable",
                   complex_rule=_matmul_complex)


def _swap(x):
    """The last two axes swapped."""
    n = x.ndim
    return PRIMITIVES["transpose"].bind(x, perm=tuple(range(n - 2)) + (n - 1, n - 2))


def _matmul_vjp(ct, a, b, *, out):
    """d(a @ b) = da @ b + a @ db: a's cotangent ct @ b^T, b's a^T @ ct, each summed over
    the batch dims it was broadcast along."""
    return (unbroadcast(matmul.bind(ct, _swap(b)), a), unbroadcast(matmul.bind(_swap(a), ct), b))


matmul.vjp = _matmul_vjp

matmul.batch = batching.broadcasting(matmul)     # batch dims broadcast as NumPy's matmul
