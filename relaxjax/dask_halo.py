"""Halo exchange for :func:`relaxjax.dask.map_overlap`: two tasks per chunk, or one.

Dask's ``overlap`` builds every extended chunk from slices of its neighbours, one task per
slice and a concatenation per chunk, after adding the array's boundary as extra chunks
(slices and concatenations again): for the 3 x 3 blocks of a periodic plate, 286 tasks
before the stencil runs, and 164 after Dask's graph optimisation.  On a ``distributed``
scheduler each task costs the scheduler about a millisecond of its own serial work, which a
cluster of two workers on two cores has to fit between the chunks: 0.2 s of a 0.9 s run
(``benchmarks/dask_scaling.py``).  Here each chunk has two tasks instead:

- ``halo-pieces``: the chunk's slices that its neighbours need, one dict per chunk keyed by
  the direction from the neighbour to this chunk (views of the chunk; a ``distributed``
  worker sends the dict, only the slices' bytes);
- the stencil task: the chunk and its neighbours' dicts, assembled into the extended chunk
  (``np.block``), the boundary added where the chunk meets the array's edge, the function
  called, and the halo trimmed from its result when it returns the extended block.

The pieces tasks run before any stencil task (``priority`` annotation): with one thread per
worker, a neighbour's slices would otherwise wait behind a whole stencil on that worker.

The boundary is what Dask's ``overlap`` makes of it (its ``periodic``, ``reflect``,
``nearest``, constant and ``"none"``): Dask adds it axis by axis to the whole array, axis 0
first; a chunk at an edge gets the same values from ``np.pad`` of its own in-range extended
block, axis by axis in the same order ("reflect" is ``np.pad``'s "symmetric", "nearest" its
"edge").  Every halo comes from the chunk and its immediate neighbours, so each side of an
axis is at most its shortest chunk (``rechunk`` merges shorter ones first, as Dask does).
"""
from __future__ import annotations

from itertools import product
from numbers import Number
from typing import Callable

import numpy as np

import dask.array as da
from dask.array.overlap import ensure_minimum_chunksize
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

# np.pad's mode for each of Dask's boundary kinds that adds values (a number: "constant")
_PAD_MODES = {"reflect": "symmetric", "nearest": "edge"}

# priority of the pieces tasks over the stencil tasks (higher runs first)
PIECES_PRIORITY = 1


def rechunked(x: da.Array, sides: list, allow_rechunk: bool) -> da.Array:
    """``x`` with every chunk at least as long as its axis's longer halo side (neighbours'
    slices come from one chunk); without ``allow_rechunk`` a shorter chunk is an error."""
    want = tuple(ensure_minimum_chunksize(max(s), c) if max(s) else c for s, c in zip(sides, x.chunks))
    if want == x.chunks:
        return x
    if not allow_rechunk:
        ax = next(a for a, (w, c) in enumerate(zip(want, x.chunks)) if w != c)
        raise ValueError(f"depth: axis {ax} has chunks {x.chunks[ax]} shorter than its halo of "
                         f"{max(sides[ax])}; give allow_rechunk=True to merge them first")
    return x.rechunk(want)


def _directions(ndim: int) -> list[tuple]:
    """Every neighbour's direction, -1 (before) / 0 / +1 (after) per axis, less the chunk."""
    return [v for v in product((-1, 0, 1), repeat=ndim) if any(v)]


def _piece(block: np.ndarray, v: tuple, sides: tuple):
    """The slice of ``block`` that the chunk in direction ``-v`` from it reads (``v``: from
    the reader to this block): -1 on an axis (this block is before the reader) its last
    ``before`` rows, +1 its first ``after`` rows, 0 all of them; None when a side is 0."""
    index = []
    for ax, (d, (lo, hi)) in enumerate(zip(v, sides)):
        if (d < 0 and not lo) or (d > 0 and not hi):
            return None
        index.append(slice(block.shape[ax] - lo, None) if d < 0 else slice(0, hi) if d > 0 else slice(None))
    return block[tuple(index)]


def _pieces(block: np.ndarray, sides: tuple) -> dict:
    """Every slice of ``block`` its neighbours read, keyed by direction (``_piece``)."""
    return {v: p for v in _directions(block.ndim) if (p := _piece(block, v, sides)) is not None}


class StencilTask:
    """The stencil task's function: assemble, pad at the array's edges, call, trim."""

    def __init__(self, fn: Callable, sides: tuple, boundary: tuple, trim: bool):
        self.fn, self.sides, self.boundary, self.trim = fn, sides, boundary, trim

    def __call__(self, block: np.ndarray, edges: tuple, neighbours: list):
        """``edges``: per axis, (at the array's start, at its end); ``neighbours``: for
        each of ``_directions``, the neighbour there (its pieces dict, or its whole block;
        None: none)."""
        got = dict(zip(_directions(block.ndim), neighbours))
        have = [[d for d in (-1, 0, 1) if d == 0 or self._has(ax, d, edges)] for ax in range(block.ndim)]

        def nest(prefix: tuple):
            if len(prefix) == block.ndim:
                if not any(prefix):
                    return block
                src = got[prefix]
                return src[prefix] if isinstance(src, dict) else _piece(src, prefix, self.sides)
            return [nest(prefix + (d,)) for d in have[len(prefix)]]
        ext = np.block(nest(()))
        for ax, ((lo, hi), kind, (start, end)) in enumerate(zip(self.sides, self.boundary, edges)):
            if kind in ("periodic", "none"):
                continue
            width = [(0, 0)] * block.ndim
            width[ax] = (lo if start else 0, hi if end else 0)
            if width[ax] != (0, 0):
                ext = (np.pad(ext, width, mode=_PAD_MODES[kind]) if kind in _PAD_MODES else
                       np.pad(ext, width, mode="constant", constant_values=kind))
        out = self.fn(ext)
        if not self.trim:
            return out
        index = tuple(slice(self._before(ax, edges), out.shape[ax] - self._after(ax, edges))
                      for ax in range(block.ndim))
        return out[index]

    def _has(self, ax: int, d: int, edges: tuple) -> bool:
        """Whether the extended chunk holds a neighbour's slice on side ``d`` of axis ``ax``
        (an edge of a non-periodic axis is padded afterwards, or left out for "none")."""
        lo, hi = self.sides[ax]
        if not (lo if d < 0 else hi):
            return False
        return self.boundary[ax] == "periodic" or not edges[ax][0 if d < 0 else 1]

    def _before(self, ax: int, edges: tuple) -> int:
        return self.sides[ax][0] if self.boundary[ax] != "none" or not edges[ax][0] else 0

    def _after(self, ax: int, edges: tuple) -> int:
        return self.sides[ax][1] if self.boundary[ax] != "none" or not edges[ax][1] else 0


def reads_whole_blocks(chunks: tuple, sides) -> bool:
    """Whether a stencil task reads its neighbours' whole blocks rather than their pieces
    dicts: where a dict (the halo's bytes, about 2 * depth / chunk of a block per axis)
    would be larger than a block (a halo as deep as a chunk is long, as with halo = steps
    and one call per chunk); that also saves the pieces tasks.  Measured on a LocalCluster
    of 2 workers (``benchmarks/dask_scaling.py``, 16 chunks of 480 with halos of 192):
    dicts of 4 MB sent for one 1 MB slice each took 0.2 s per worker."""
    first = [c[0] for c in chunks]
    return bool(np.prod([c + lo + hi for c, (lo, hi) in zip(first, sides)]) > 2 * np.prod(first))


def extended_chunks(x: da.Array, sides: list, boundary: tuple) -> tuple:
    """The shapes of the extended chunks, per axis (a "none" edge gets no halo)."""
    out = []
    for ax, cs in enumerate(x.chunks):
        lo, hi = sides[ax]
        padded = boundary[ax] != "none"
        out.append(tuple(c + (lo if padded or i > 0 else 0) + (hi if padded or i < len(cs) - 1 else 0)
                         for i, c in enumerate(cs)))
    return tuple(out)


def map_halo(fn: Callable, x: da.Array, sides: list, boundary: tuple, *, trim: bool,
             chunks: tuple, meta: np.ndarray, name: str) -> da.Array:
    """``fn`` on every halo-extended chunk of ``x`` (``sides``: per axis (before, after);
    ``boundary``: per axis "periodic", "reflect", "nearest", "none" or a number), two tasks
    per chunk (module docstring); ``trim``: ``fn`` returns the extended shape, trimmed
    here.  ``chunks``: the result's."""
    for kind in boundary:
        if not (isinstance(kind, Number) or kind in ("periodic", "none", *_PAD_MODES)):
            raise ValueError(f"boundary: unknown kind {kind!r}")
    sides, boundary = tuple(tuple(s) for s in sides), tuple(boundary)
    token = tokenize(x, sides, boundary, trim, fn)
    pieces_name, out_name = f"halo-pieces-{token}", f"{name}-{token}"
    task = StencilTask(fn, sides, boundary, trim)
    by_blocks = reads_whole_blocks(x.chunks, sides)
    nb = x.numblocks
    source = x.name if by_blocks else pieces_name
    stencils = {}
    for idx in product(*(range(n) for n in nb)):
        edges = tuple((i == 0, i == n - 1) for i, n in zip(idx, nb))
        neighbours = []
        for v in _directions(x.ndim):
            at = []
            for ax, (i, d) in enumerate(zip(idx, v)):
                if not task._has(ax, d, edges) and d:
                    break
                at.append((i + d) % nb[ax])
            else:
                neighbours.append((source, *at))
                continue
            neighbours.append(None)
        stencils[(out_name, *idx)] = (task, (x.name, *idx), edges, neighbours)
    deps = [x]
    if not by_blocks:
        pieces = {(pieces_name, *idx): (_pieces, (x.name, *idx), sides) for idx in product(*(range(n) for n in nb))}
        layer = MaterializedLayer(pieces, annotations={"priority": PIECES_PRIORITY})
        deps.append(da.Array(HighLevelGraph.from_collections(pieces_name, layer, dependencies=[x]),
                             pieces_name, x.chunks, meta=x._meta))   # (a dict per chunk: for the graph only)
    graph = HighLevelGraph.from_collections(out_name, MaterializedLayer(stencils), dependencies=deps)
    return da.Array(graph, out_name, chunks, meta=meta)
