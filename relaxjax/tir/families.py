"""Kernel families: loop-level programs that differ only in integer constants, compiled once.

A program written per part or per stage makes kernels that are equal but for a few numbers:
the real and imaginary halves of a complex value read at offset 0 and offset 1; the stages
of an unrolled FFT loop over sizes R**i.  Each would be optimised and compiled on its own,
and LLVM's time grows with the number of kernels, not with what differs between them.
``families`` finds such kernels and gives each group one program in which the constants
that differ are dims (``_k<position>``): a backend compiles it once and passes each member's
numbers at its call, as it passes dims.

Which constants may become dims: non-negative ``int64`` constants of the body (loop bounds,
offsets, strides) and integer extents of the buffers' shapes -- never a divisor (``i // 4``
is a shift; ``i // k`` a division in the innermost loop) and never in a program whose
checks read shapes apart from its buffers (index checks, host checks, zeroed outputs).
Non-negative, so code generators may keep treating every dim as a size.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import sympy

from .index_checks import data_index_checks
from .nodes import INDEX, Buffer, Const, Op, PrimFunc, Var
from .visit import map_expr, map_stmt_exprs, walk_expr

LIFTED = "_k"                       # lifted constants are the dims _k<position>
_NOT_LIFTED = frozenset({"floor_div", "rem"})   # their second operand stays a number


def _liftable(f: PrimFunc) -> bool:
    return not (f.host_checks or f.check_data_indices or f.zero_outputs or data_index_checks(f)) \
        and not any(d.startswith(LIFTED) for d in f.dim_vars)


def template(f: PrimFunc, lift: frozenset | None = None) -> tuple[PrimFunc, list[int]]:
    """``f`` with the constants at positions ``lift`` (all when None) made dims, and the
    values of every liftable constant in order of position (shapes first, then the body
    in pre-order): programs equal but for those numbers give equal templates."""
    values: list[int] = []
    dims: list[str] = []

    def number(v: int):
        """The constant ``v`` at the next position: itself, or the dim that replaces it."""
        p = len(values)
        values.append(v)
        if lift is None or p in lift:
            dims.append(f"{LIFTED}{p}")
            return dims[-1]
        return None

    params = []
    for b in f.params:
        shape = []
        for d in b.shape:
            if isinstance(d, (int, sympy.Integer)) and int(d) >= 0:
                name = number(int(d))
                shape.append(sympy.Symbol(name, integer=True, nonnegative=True) if name else d)
            else:
                shape.append(d)
        params.append(Buffer(b.name, tuple(shape), b.dtype))

    def const(e):
        if isinstance(e, Const) and e.dtype == INDEX and int(e.value) >= 0:
            name = number(int(e.value))
            return Var(name, INDEX) if name else e
        return e

    def expr(e):
        """Lift in operands; a divisor stays a number (kept out of the positions too)."""
        kept: set = set()
        for x in _ops(e):
            if x.name in _NOT_LIFTED and isinstance(x.args[1], Const):
                kept.add(id(x.args[1]))
        return map_expr(e, lambda x: x if id(x) in kept else const(x))

    body = map_stmt_exprs(f.body, expr)
    out = dataclasses.replace(f, params=params, dim_vars=list(f.dim_vars) + dims, body=body)
    return out, values


def _ops(e):
    return (x for x in walk_expr(e) if isinstance(x, Op))


def families(funcs: list, code_key: Callable[[PrimFunc], str]) -> dict:
    """``id(f)`` -> ``(program, numbers)`` for each kernel of ``funcs`` that shares its code
    with another one once their differing constants are dims: call ``program`` with
    ``f``'s dims followed by ``numbers``.  ``code_key`` names generated code (equal keys:
    equal machine code), so kernels group only where the backend's code is the same."""
    cands = [f for f in funcs if _liftable(f)]
    groups: dict = {}
    for f in cands:
        full, values = template(f)
        if values:
            groups.setdefault(code_key(full), []).append((f, values))
    out: dict = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        first = members[0][1]
        differ = frozenset(p for p in range(len(first))
                           if any(v[p] != first[p] for _, v in members))
        if not differ:
            continue                 # identical kernels: one code already
        program = template(members[0][0], differ)[0]
        for f, values in members:
            out[id(f)] = (program, tuple(values[p] for p in sorted(differ)))
    return out


__all__ = ["LIFTED", "template", "families"]
