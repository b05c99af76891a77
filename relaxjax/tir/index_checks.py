"""Indices read from data, checked where they are used.

A user kernel may index with a value it read (``out[idx[i]] = v[i]``, ``x[idx[i]]``), which
no proof at trace time can bound.  Programs that ask for it (``PrimFunc.check_data_indices``,
set for kernels written with ``rj.kernel``) have every such index compared with its axis
size by the code the backends generate: one unsigned compare per access (a negative index
is out of range too, as in the reference interpreter).  The first failing access writes an
*error record* of ``ERROR_RECORD`` int64s -- its check number + 1 (0 while none failed),
the index, the axis size -- and the caller raises :func:`index_error` from it, with the
message the reference interpreter gives.  Generated programs keep their gather indices in
range themselves (clamped, and checked by the caller: ``host_checks``).
"""
from __future__ import annotations

from .nodes import Load, Local, PrimFunc, Store, Var
from .visit import stmt_exprs, walk_expr, walk_stmts

ERROR_RECORD = 3


def is_data_index(e, local_names: set) -> bool:
    """Whether index ``e`` depends on data: it loads, or reads a local of the program."""
    return any(isinstance(x, Load) or isinstance(x, Var) and x.name in local_names for x in walk_expr(e))


def data_index_checks(f: PrimFunc) -> list[tuple]:
    """``(access, axis)`` for each index of a load or store of ``f`` that depends on data, in
    program order; empty unless ``f.check_data_indices``.  The position in this list is
    the access's check number, which the backends and the error message share."""
    if not getattr(f, "check_data_indices", False):
        return []
    local_names = {s.var.name for s in walk_stmts(f.body) if isinstance(s, Local)}
    out: list = []
    for s in walk_stmts(f.body):
        nodes = [s] if isinstance(s, Store) else []
        for e in stmt_exprs(s):
            nodes += [x for x in walk_expr(e) if isinstance(x, Load)]
        for node in nodes:
            out += [(node, ax) for ax, i in enumerate(node.index) if is_data_index(i, local_names)]
    return out


def check_numbers(f: PrimFunc) -> dict:
    """``(id(access), axis)`` -> check number, for code generators."""
    nums: dict = {}
    for k, (node, ax) in enumerate(data_index_checks(f)):
        nums.setdefault((id(node), ax), k)
    return nums


def index_error(f: PrimFunc, record) -> IndexError:
    """The IndexError for a filled error record of ``f``."""
    node, axis = data_index_checks(f)[int(record[0]) - 1]
    return IndexError(f"loop program {f.name}: index {int(record[1])} is out of bounds for axis "
                      f"{axis} of buffer {node.buffer.name} with size {int(record[2])}")
