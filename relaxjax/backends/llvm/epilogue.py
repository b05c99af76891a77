"""A matrix product's epilogue in the product: the loop-level program that follows a
generated product and maps its result element by element (a bias, an activation, a
residual: ``gelu(x @ W1 + b1)``) runs on each block of the result as soon as the block is
final, while it is in cache, instead of as a pass over the whole result after the product.

The segment passes the program's tile function (``codegen``: ``sym.tile(args, r0, r1, c0,
c1)``, the program's loops restricted to a rectangle) to the generated product, which calls
it on every row block of a column block after the block's last contraction slice
(``gemm``: ``epi``).  Where the product runs in BLAS instead (the shape rule's choice, made
at run time), the program runs after it as before.

:func:`epilogue_pairs` says which (product, program) pairs of a segment may: the program
comes right after the product, reads the product only at the element it writes (its two
loops: rows outer, columns inner, over the product's shape), writes every output at that
element too, reads none of its outputs and accumulates nothing across elements; and no
output of the program shares memory with a value the product still reads (the memory plan
may give it the storage of an operand that dies at the product); and the product may run
the generated code at all (the shape rule, on what is known of its dims before the call).
"""
from __future__ import annotations

from ...ir import Var
from ...tir import For, Load, Local, PrimFunc, Seq, Store, Var as TVar
from ...tir.index_checks import check_numbers
from ...tir.visit import walk_expr
from . import gemm_rule, target

# the real gemm library functions (transposed operands read through flags included)
PRODUCTS = {f"blas.{c}gemm{form}" for c in "sd" for form in ("", "_nt", "_tn", "_tt")}


def tile_fusable(f: PrimFunc, product) -> bool:
    """Whether program ``f`` maps buffer ``product`` (one of its inputs, 2-D) element by
    element in two loops, rows outer (parallel) and columns inner, so that running it on
    any rectangle of rows and columns, in any order, does what running it whole does."""
    if check_numbers(f) or f.zero_outputs or f.host_checks or len(product.shape) != 2:
        return False
    outer = f.body
    if not (isinstance(outer, For) and outer.kind == "parallel"):
        return False
    inner = outer.body.stmts[0] if isinstance(outer.body, Seq) and len(outer.body.stmts) == 1 else outer.body
    if not isinstance(inner, For):
        return False
    at = (outer.var.name, inner.var.name)
    stmts = inner.body.stmts if isinstance(inner.body, Seq) else [inner.body]
    outputs = set(id(b) for b in f.outputs)
    for s in stmts:
        if isinstance(s, Store):
            if id(s.buffer) not in outputs or _names(s.index) != at or \
                    [str(d) for d in s.buffer.shape] != [str(d) for d in product.shape]:
                return False
            exprs = [s.value]
        elif isinstance(s, Local):
            exprs = [s.init]
        else:
            return False
        for e in exprs:
            for x in walk_expr(e):
                if isinstance(x, Load) and (id(x.buffer) in outputs or
                                            (x.buffer is product and _names(x.index) != at)):
                    return False
    return True


def _names(index) -> tuple:
    return tuple(i.name if isinstance(i, TVar) else None for i in index)


def _may_be_generated(prod) -> bool:
    """Whether the shape rule may send product ``prod`` (a 2-D gemm call) to the generated
    product, from what its shapes say before it runs (``gemm_rule.may_use_generated``)."""
    a = prod.args[0].type.shape
    m, n = prod.outvars[0].type.shape
    k = a[0] if prod.callee.name[-3:] in ("_tn", "_tt") else a[1]
    known = [d if isinstance(d, int) else None for d in (m, n, k)]
    return gemm_rule.may_use_generated(prod.callee.name[5], target.vector_bits(), *known,
                                       nt=prod.callee.name.endswith("_nt"))


def epilogue_pairs(segments: list, fn, plan, excluded=frozenset()) -> dict:
    """id(product binding) -> the program binding after it that may run as its epilogue
    (see the module's docstring); ``excluded``: ids of programs that may not (their code
    is shared with others': ``tir.families``)."""
    order = {id(b): k for k, b in enumerate(fn.bindings)}
    live = plan.live if plan is not None else {}
    storage = plan.storage_of if plan is not None else {}
    out = {}
    for seg in segments:
        for prod, prog in zip(seg.calls, seg.calls[1:]):
            if prod.kind != "library" or prod.callee.name not in PRODUCTS or prog.kind != "tir" or \
                    id(prog.callee) in excluded or len(prod.outvars[0].type.shape) != 2:
                continue
            if not _may_be_generated(prod):
                continue                       # always BLAS: a tile function would go unused
            c = prod.outvars[0]
            uses = [k for k, a in enumerate(prog.args) if a is c]
            if len(uses) != 1 or not tile_fusable(prog.callee, prog.callee.inputs[uses[0]]):
                continue
            # storages the product still reads (its operands', and any value dying at it)
            # or the program reads whole (its other inputs): no output of the program may
            # take one
            at = order.get(id(prod))
            busy = {id(storage[v]) for v, (_, end) in live.items() if end == at and v in storage}
            busy |= {id(storage[a]) for a in prog.args if isinstance(a, Var) and a in storage and a is not c}
            if any(v in storage and id(storage[v]) in busy for v in prog.outvars):
                continue
            out[id(prod)] = prog
    return out
