"""``rj.autobatch``'s memory and batched calls: the arenas that hold every batch's results,
the batched cells (a cell mapped over a batch and jitted) and running one batch with its
operands read from the arenas.  See ``relaxjax.autobatch`` for the design.

Scattered operands (ACRoBat's and ED-Batch's): a batch's operand whose values are results of
earlier batches lies in rows of one arena, scattered.  Instead of copying those rows into a
contiguous array first (``np.take`` on the host), the batched cell takes the arena and an
index array and does the take itself, inside the jitted program::

    batched(arena, idx, *rest) = vmap(cell)(take(arena, idx, axis=0), *rest)

so the compiler fuses the take into the kernels that read the operand (an elementwise
consumer loads ``arena[idx[i], j]``, nothing copied); the index array's length is a symbolic
dim like the batch's, so one compile serves every batch size and every arena size.

A matrix product (``x @ W``, BLAS or the generated product) needs its operand contiguous,
so the compiled program would copy the rows first (one kernel in the call).  Measured on a
quiet 2-core machine, 2 threads (benchmarks/RESULTS.md, session 13), per batched call
against gathering on the host before it (a slice view where the layout made the rows a run,
else ``np.take``): the LSTM cell (hidden 128) at 1-64 rows, the host path 0.84-0.97x the
time; the TreeLSTM cell (hidden 256) at 1-700 rows, 0.92-0.99x with the rows a run, and
scattered 0.97-0.99x up to 16 rows, 1.01-1.03x at 64-700 (the one case the copy in the
program wins, by too little to pay for a second compile per cell that choosing per batch
would need).  So an operand the program would copy is passed plain and gathered on the
host (``PRODUCT_OPERANDS``); which operands those are, the compiler says: the first batch
of a kind traces the all-indexed cell and runs the graph pipeline on it (no code generated),
and the positions whose index array a program that only moves values reads are the copied
ones (:func:`_copied`).  ``stats()`` counts what is copied: the host's stacks and takes, and
any copy left in a compiled program.
"""
from __future__ import annotations

import inspect

import numpy as np
import optree

from . import numpy as rnp
from .autobatch_lazy import Lazy, _Batch, _Kind
from .backends import get_backend
from .compile import default_pipeline
from .compile.passes import run_pipeline
from .jit import Jitted, jit
from .tir.analysis import perfect_nest
from .tir.nodes import Load
from .vmap import vmap

PLAIN, INDEXED = "plain", "indexed"      # how a batched argument reaches the batched cell
# A product's operand, which the program would copy (gemm reads a contiguous array):
# "plain", gathered on the host (a view where the layout made its rows a run), or
# "indexed", copied by the program (see the module's docstring for the measurement)
PRODUCT_OPERANDS = "plain"
_COUNTS = ("host_gather_bytes", "gather_bytes", "operands_sliced", "operands_gathered")


class Arena:
    """The results of one signature (shape, dtype) in one ``autobatch`` call: each batch's
    results at one result position a contiguous run of rows, appended batch after batch and
    flush after flush (grown geometrically), so a result of an earlier flush is a row that a
    later batch indexes like any other.  ``data[:used]`` holds them.  Nodes keep no array:
    a lazy value reads its row through the arena, so a grown ``data`` moves nothing a node
    holds (a view handed out earlier keeps the old array, whose rows never change)."""
    __slots__ = ("data", "used")

    def __init__(self, sig: tuple, rows: int):
        shape, dtype = sig
        self.data = np.empty((rows,) + tuple(shape), dtype)
        self.used = 0

    def reserve(self, rows: int) -> int:
        """Room for ``rows`` more rows: the first one's index."""
        base, need = self.used, self.used + rows
        if need > len(self.data):
            data = np.empty((max(need, 2 * len(self.data)),) + self.data.shape[1:], self.data.dtype)
            data[:base] = self.data[:base]
            self.data = data
        self.used = need
        return base


class BatchedCell:
    """A kind's cell mapped over a batch (``in_axes``) and jitted; each batched argument is
    passed as an array (``PLAIN``) or as a source and an int64 index array whose rows are
    the batch (``INDEXED``).  ``copies``: the indexed positions whose rows the compiled
    program copies before using them (a product's operand), known after the first call."""
    __slots__ = ("jitted", "modes", "copies")

    def __init__(self, cell: Jitted, tree, in_axes: tuple, modes: tuple):
        if tree is None:
            flat = cell.fun
        else:
            def flat(*leaves):
                args, kwargs = optree.tree_unflatten(tree, list(leaves))
                return cell.fun(*args, **kwargs)
        mapped = vmap(flat, in_axes=in_axes)

        def batched(*args):
            vals, j = [], 0
            for mode in modes:
                if mode is INDEXED:
                    vals.append(rnp.take(args[j], args[j + 1], axis=0))
                    j += 2
                else:
                    vals.append(args[j])
                    j += 1
            return mapped(*vals)
        batched.__name__ = f"{cell.__name__}_batched"
        # named positional parameters: jit's fast call path takes a fixed arity, and the
        # printed program names its arguments after the cell's
        names = _param_names(cell, tree, len(modes))
        params = []
        for name, mode in zip(names, modes):
            params += [name + "_src", name + "_idx"] if mode is INDEXED else [name]
        batched.__signature__ = inspect.Signature(
            [inspect.Parameter(p, inspect.Parameter.POSITIONAL_ONLY) for p in params])
        self.jitted, self.modes = jit(batched), modes
        self.copies: frozenset | None = None if INDEXED in modes else frozenset()

    def find_copies(self) -> None:
        """Which indexed positions the compiled program copies (see ``_copied``)."""
        self.copies = _copied(_compiled_main(self.jitted), self.modes)


def _copied(fn, modes: tuple) -> frozenset:
    """The indexed positions whose rows graph function ``fn`` (a batched cell's program
    after the pipeline) copies: a loop-level program that only moves values
    (``out[i..] = src[..]``) reads that position's index array."""
    index_param, j = {}, 0
    for k, mode in enumerate(modes):
        if mode is INDEXED:
            index_param[j + 1] = k
            j += 2
        else:
            j += 1
    if fn is None or len(fn.params) != j:    # not the program we passed: count every one copied
        return frozenset(k for k, m in enumerate(modes) if m is INDEXED)
    by_var = {fn.params[i]: k for i, k in index_param.items()}
    copies = set()
    for b in fn.bindings:
        if b.kind == "tir" and _moves_only(b.callee):
            copies.update(by_var[a] for a in b.args if a in by_var)
    return frozenset(copies)


def _param_names(cell: Jitted, tree, n: int) -> list:
    """The cell's parameter names (``a0``, ``a1``... for a pytree of arguments or a
    signature that does not say)."""
    if tree is None and cell._sig is not None:
        ps = list(cell._sig.parameters.values())
        if len(ps) == n and all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in ps):
            return [p.name for p in ps]
    return [f"a{k}" for k in range(n)]


def _compiled_main(f: Jitted):
    """The graph function of ``f``'s compiled entry (a batched cell compiles one: its dims
    are symbolic), or None."""
    modules = f.compiled_modules()
    return modules[0].main if modules else None


def _moves_only(prim) -> bool:
    nest = perfect_nest(prim)
    return nest is not None and isinstance(nest[1].value, Load)


# ---------------------------------------------------------------------------- operands
def _arena_rows(xs: list):
    """(arena, rows) when every value is a result, else None.  (The results at one argument
    position share the kind's signature for it, and a call keeps one arena per signature:
    they are all in the first one's arena.)"""
    if len(set(map(type, xs))) != 1 or type(xs[0]) is not Lazy:
        return None
    x0 = xs[0]
    rows = []
    append = rows.append
    for x in xs:
        n = x.node
        append(n.batch.bases[x.k] + n.pos)
    return x0.node.batch.arenas[x0.k], rows


def _sliced_or_taken(xs: list, stats: dict):
    """A PLAIN operand: a slice of an arena when its values are a run of one, one ``take``
    (on the host) when they lie in one arena, else the values stacked."""
    found = _arena_rows(xs)
    if found is None:
        out = _stacked(xs)
    else:
        arena, rows = found
        r0, m = rows[0], len(rows)
        if rows[-1] - r0 == m - 1 and rows == list(range(r0, r0 + m)):
            stats["operands_sliced"] += 1
            return arena.data[r0:r0 + m]
        out = arena.data.take(rows, axis=0)
    stats["operands_gathered"] += 1
    stats["gather_bytes"] += out.nbytes
    stats["host_gather_bytes"] += out.nbytes
    return out


def _indexed(xs: list):
    """An INDEXED operand: (source, index array, bytes copied on the host).  Values in one
    arena: the arena itself, nothing copied.  Otherwise (arrays passed to the cell, such as
    a first state, maybe mixed with results) the distinct values stacked, each once (a
    first state that every instance passes is one row)."""
    found = _arena_rows(xs)
    if found is not None:
        return found[0].data, np.array(found[1], np.int64), 0
    ids = list(map(id, xs))
    if len(set(ids)) == len(ids):             # all distinct (a word's embedding per node)
        src = _stacked(xs)
        return src, np.arange(len(xs), dtype=np.int64), src.nbytes
    seen: dict = {}
    vals, idx = [], []
    for x, i0 in zip(xs, ids):
        i = seen.get(i0)
        if i is None:
            i = seen[i0] = len(vals)
            vals.append(x.value if type(x) is Lazy else x)
        idx.append(i)
    src = _stacked(vals)
    return src, np.array(idx, np.int64), src.nbytes


def _stacked(xs: list) -> np.ndarray:
    """The values (arrays of one shape and dtype, the kind's, or lazy values) stacked:
    ``np.array`` of a list of arrays (one C loop; ``np.stack`` costs 2.7x as much on a
    TreeLSTM's 1204 leaves)."""
    if Lazy in set(map(type, xs)):
        xs = [x.value if type(x) is Lazy else x for x in xs]
    return np.array(xs)


def _operands(cell: BatchedCell, nodes: list, first: tuple, s: dict):
    """The batched cell's arguments for ``nodes`` and the indexed positions (with their
    row bytes), host copies counted in ``s``."""
    args, indexed = [], []
    for k, mode in enumerate(cell.modes):
        if mode is None:
            x = first[k]
            args.append(x.value if type(x) is Lazy else x)
        elif mode is INDEXED:
            src, idx, copied = _indexed([n.args[k] for n in nodes])
            args += (src, idx)
            indexed.append((k, src.strides[0]))
            if copied:
                s["host_gather_bytes"] += copied
                s["gather_bytes"] += copied
        else:
            args.append(_sliced_or_taken([n.args[k] for n in nodes], s))
    return args, indexed


def _new_cell(kind: _Kind, in_axes: tuple, scatter: bool, nodes: list) -> BatchedCell:
    """A kind's batched cell for ``in_axes``: every batched argument plain (``scatter``
    off), else indexed except those the program would copy anyway (a product's operands,
    gemm reading a contiguous array): asked of the compiler on the first batch's arguments
    (traced and run through the graph pipeline, no code generated), those are passed plain
    and gathered on the host (a view when the layout made their rows a run; measured no
    slower than the copy in the program, see the module's docstring)."""
    batched = [k for k, ax in enumerate(in_axes) if ax is not None]
    modes = [None] * len(in_axes)
    for k in batched:
        modes[k] = INDEXED if scatter else PLAIN
    trial = BatchedCell(kind.cell, kind.tree, in_axes, tuple(modes))
    if not scatter or PRODUCT_OPERANDS == "indexed":
        return trial
    args, _ = _operands(trial, nodes, nodes[0].args, dict.fromkeys(_COUNTS, 0))    # (not counted)
    backend = get_backend(kind.cell.backend)      # the pipeline jit runs for this backend
    pipeline = default_pipeline(lower=getattr(backend, "runs_loops", True),
                                pointwise_loops_in_cache=getattr(backend, "pointwise_loops_in_cache", False),
                                strided_products=getattr(backend, "strided_products", False))
    program = run_pipeline(trial.jitted.lower(*args).module, pipeline, dump_input=False)
    copied = _copied(program.main, trial.modes)
    if not copied:
        return trial
    for k in copied:
        modes[k] = PLAIN
    return BatchedCell(kind.cell, kind.tree, in_axes, tuple(modes))


def run_batch(owner: object, b: _Batch) -> None:
    """Run one planned batch of ``owner`` (the ``AutoBatched``: its batched cells, options
    and stats): its operands from the arenas, the batched cell (or the cell itself when
    every node passes the same arguments), the results into the arenas."""
    kind, nodes, in_axes = b.kind, b.nodes, b.in_axes
    s = owner._stats
    first = nodes[0].args
    m = len(nodes)
    if in_axes is None:                       # every node alike: the cell itself, once
        args = [x.value if type(x) is Lazy else x for x in first]
        if kind.tree is None:
            out = kind.cell(*args)
        else:
            a, kw = optree.tree_unflatten(kind.tree, args)
            out = kind.cell(*a, **kw)
        leaves = [np.asarray(v)[None] for v in optree.tree_leaves(out, none_is_leaf=False)]
    else:
        cells = owner._cells
        cell = cells.get((kind, in_axes))
        if cell is None:
            cell = cells[kind, in_axes] = _new_cell(kind, in_axes, owner.scatter, nodes)
        args, indexed = _operands(cell, nodes, first, s)
        out = cell.jitted(*args)
        if cell.copies is None:
            cell.find_copies()
        for k, row_bytes in indexed:          # read in place by the kernels, or copied by the program
            if k in cell.copies:
                s["operands_gathered"] += 1
                s["gather_bytes"] += m * row_bytes
            else:
                s["operands_indexed"] += 1
        form = kind.out_form
        leaves = [out] if form == 1 else out if form == 2 else optree.tree_leaves(out, none_is_leaf=False)
    for k, arena in enumerate(b.arenas):
        if arena is not None:
            base = b.bases[k]
            arena.data[base:base + m] = leaves[k]
            s["arena_bytes"] += m * arena.data.strides[0]
    b.done = True
    b.nodes = None                            # nodes point at their batch: no cycle left behind
