"""The loop level of the cross-level IR (plain data): tensor programs (``PrimFunc``) over
buffers with symbolic shapes, their printer (``nodes``), verifier (``verify``), generic
traversal (``visit``) and loop analyses (``analysis``).  Imports nothing above
``shapes``/``dtypes``: the kernel parser, the passes and every backend build on it."""
from .nodes import (BOOL, INDEX, LOOP_KINDS, Assign, Buffer, Const, Expr, For, If, Load, Local, Op,
                    PrimFunc, Seq, Stmt, Store, Var, as_expr, dim_vars, expr_str, fresh, from_sympy,
                    index_poly, loop_nest, op, to_sympy)
from .verify import TIRError, verify_primfunc
from . import visit  # noqa: F401

__all__ = ["BOOL", "INDEX", "LOOP_KINDS", "Assign", "Buffer", "Const", "Expr", "For", "If", "Load",
           "Local", "Op", "PrimFunc", "Seq", "Stmt", "Store", "Var", "as_expr", "dim_vars",
           "expr_str", "fresh", "from_sympy", "index_poly", "loop_nest", "op", "to_sympy", "TIRError",
           "verify_primfunc", "visit"]
