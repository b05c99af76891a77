"""Graph-level simplification: constant folding, exact algebraic identities, common
subexpressions, symbolic-shape normalisation, and ``canonicalize`` (all of them with dead
code elimination, to a fixed point).

Every pass here works on each graph :class:`~relaxjax.ir.Function` of a module (other
entries, such as loop-level programs, pass through) and rewrites only ``primitive``
bindings; ``call_tir``, ``call_library`` and sub-function calls are left alone, though
their operands are renamed like every other use.  Passes never mutate their input: an
unchanged function comes back as the same object, a changed one as a new
:class:`~relaxjax.ir.Function` with the same ``bounds``, ``guards`` and ``attrs``.

A value is only ever replaced by one of the same dtype, weakness and (provably) the same
shape, so the function's signature and result types stay what they were.  A result may
become a :class:`~relaxjax.ir.Literal` (a folded constant): both backends return literal
results, as they do for a traced function that returns a constant.
"""
from __future__ import annotations

from ...ir import IRModule
from ..dce import dead_code_elimination
from ..passes import Pass, run_pipeline
from .algebra import simplify_algebra
from .common import relink, substitute_vars
from .cse import eliminate_common_subexpr
from .fold import FOLD_MAX_ELEMENTS, fold_constants
from .shapes import simplify_dim, simplify_shapes

__all__ = ["fold_constants", "simplify_algebra", "eliminate_common_subexpr", "simplify_shapes",
           "canonicalize", "substitute_vars", "simplify_dim", "FOLD_MAX_ELEMENTS"]

CANONICALIZE_ROUNDS = 4

# dead code elimination, with calls of sub-functions it shortened calling the new ones
_dce = Pass(dead_code_elimination.name, lambda m: relink(m, dict(dead_code_elimination(m).functions)))


def _canonicalize(module: IRModule) -> IRModule:
    passes = [simplify_shapes, fold_constants, simplify_algebra, eliminate_common_subexpr, _dce]
    for _ in range(CANONICALIZE_ROUNDS):
        new = run_pipeline(module, passes, dump_input=False)
        if _same_module(new, module):
            return new
        module = new
    return module


def _same_module(a: IRModule, b: IRModule) -> bool:
    return a.entry == b.entry and a.functions.keys() == b.functions.keys() and \
        all(a.functions[k] is b.functions[k] for k in a.functions)


canonicalize = Pass("Canonicalize", _canonicalize)
