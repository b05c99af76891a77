"""The LLVM module of one generated matrix product variant (``gemm.VARIANTS``), its own
shared library: the packed product (``gemm``) and, for the variants reading B transposed,
the path that streams B for a few rows (``gemm_skinny``), which the packed product's entry
branches to."""
from __future__ import annotations

from . import gemm
from .gemm_skinny import skinny_text

# the streaming path forks the OpenMP team from this many bytes of B (about 100 us of one
# thread's streaming; less runs on the calling thread)
PARALLEL_MIN_SKINNY_BYTES = 1 << 18


def module_text(variant: str, vector_bits: int) -> str:
    """The LLVM module of product ``variant`` (``gemm.gemm_symbol``'s name)."""
    d, form = variant.split("_")[2:]
    ta, tb = form[0] == "t", form[1] == "t"
    parts = [gemm.gemm_text(d, ta, tb, vector_bits)]
    if tb and not ta:
        parts.append(skinny_text(gemm.blocking(d, vector_bits), variant, gemm.team_wanted,
                                 PARALLEL_MIN_SKINNY_BYTES))
    return "\n".join(["; relaxjax generated matrix product " + variant,
                      "@rj_num_threads = external global i32", "@rj_serial_until = external global i64",
                      *sorted(gemm.DECLARATIONS), *parts, gemm.ATTRIBUTES, ""])
