"""Scalar math functions and their glibc libmvec vector variants.

A loop calling libm's ``tanhf`` does not vectorize usefully (LLVM widens the call and then
scalarizes it).  Instead each call site carries the ``vector-function-abi-variant``
attribute naming libmvec's vector versions (x86 vector ABI names, ``_ZGV<isa>N<lanes><args>_<fn>``),
so the loop vectorizer calls e.g. ``_ZGVdN8v_expf`` on 8 floats at once.  The variant is chosen
from the host's features; without libmvec the scalar libm call remains (correct, slower).
"""
from __future__ import annotations

from ..scalar_math import MATH, libm_name as _c_name
from . import target

# x86 vector function ABI: ISA letters available on each host class, widest first
_ISAS = {"avx512": [("e", 512), ("d", 256), ("b", 128)], "avx2": [("d", 256), ("b", 128)],
         "sse": [("b", 128)]}


def libm_name(op: str, ty: str) -> str:
    """The libm symbol of ``op`` on LLVM type ``ty`` ("float"/"double")."""
    return _c_name(op, ty == "float")


def vector_variants(op: str, ty: str) -> list[tuple[str, int]]:
    """[(vector symbol, lanes)] usable on this host for ``op`` on ``ty`` ("float"/"double")."""
    if not MATH[op][2] or not target.libmvec():
        return []
    out = []
    for letter, bits in _ISAS[target.vector_isa()]:
        lanes = bits // (32 if ty == "float" else 64)
        out.append((f"_ZGV{letter}N{lanes}{'v' * MATH[op][1]}_{libm_name(op, ty)}", lanes))
    return out


def declarations(used: set) -> list[str]:
    """Declarations for the (op, ty) pairs used.  The scalar function names its vector
    variants; those must be kept alive in ``llvm.compiler.used`` or GlobalOpt deletes them
    before the loop vectorizer looks for them."""
    decls, keep = [], []
    for k, (op, ty) in enumerate(sorted(used)):
        name = libm_name(op, ty)
        nargs = MATH[op][1]
        variants = vector_variants(op, ty)
        group = 100 + k
        vfabi = ",".join(f"{sym}({sym})" for sym, _ in variants)
        attr = f' "vector-function-abi-variant"="{vfabi}"' if variants else ""
        decls.append(f"declare {ty} @{name}({', '.join([ty] * nargs)}) #{group}")
        decls.append(f"attributes #{group} = {{ nounwind willreturn memory(none){attr} }}")
        for sym, lanes in variants:
            vt = f"<{lanes} x {ty}>"
            decls.append(f"declare {vt} @{sym}({', '.join([vt] * nargs)}) #0")
            keep.append(sym)
    if keep:
        decls.append(f"@llvm.compiler.used = appending global [{len(keep)} x ptr] "
                     f"[{', '.join(f'ptr @{s}' for s in keep)}], section \"llvm.metadata\"")
    return decls
