"""The default pass pipeline, the one ``jit`` runs between tracing and the backend."""
from __future__ import annotations

from .attention import attention_calls
from .fuse import fuse_ops
from .growing_caches import growing_caches
from .legalize import legalize, legalize_views
from .matvec_pairs import matvec_pairs
from .passes import Pass
from .pointwise_loops import pointwise_loops
from .product_transposes import product_transposes
from .simplify import canonicalize
from .split_complex import split_complex


def default_pipeline(lower: bool = True, pointwise_loops_in_cache: bool = False,
                     strided_products: bool = False) -> list[Pass]:
    """Split complex values into real parts, canonicalize (fold constants, exact algebraic
    identities, CSE, shape simplification, DCE), replace attention written out by the
    attention library call (``AttentionCalls``), fuse, then (for backends that run
    loop-level programs) pair matrix-vector products of one matrix, split transposes that
    only products read (``ProductTransposes``) and lower to call_tir / call_library.
    ``pointwise_loops_in_cache`` (the LLVM backend asks for it): a ``fori_loop`` updating
    each point from itself runs tile by tile (``PointwiseLoops``).  ``strided_products``
    (the LLVM backend): a product reads an operand transposed with its last axis kept in
    place (``blas_calls.rows_view``)."""
    if not lower:
        return [split_complex, canonicalize, attention_calls, growing_caches, fuse_ops]
    tiles = [pointwise_loops] if pointwise_loops_in_cache else []
    return [split_complex, canonicalize, attention_calls, growing_caches, matvec_pairs, product_transposes, *tiles,
            fuse_ops, legalize_views if strided_products else legalize]
