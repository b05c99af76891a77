"""Loops whose extent is read from a ragged array's offsets (CoRa's variable loops, Fegade
et al., MLSys 2022): ``for s in range(batch): for i in range(offsets[s], offsets[s + 1])``,
loop-level programs (``@rj.kernel``) that every backend compiles, for the ragged ops that
run over each sequence's rows:

- reductions over the sequences (``segment_reduce``: sum, max, min; float32/64, int32/64),
  parallel over the sequences and vectorized over the inner dims; a sequence longer than
  ``TILE_ROWS`` is split into tiles of rows reduced in parallel, then their partial results
  combined (CoRa's split of work rather than of sequences: one long sequence no longer runs
  on one thread, 1.6-1.8x on such batches, 4-8 % slower on batches of short ones);
- each packed row's sequence (``segment_ids``), the sequences in parallel (``rj.prange``);
- a ragged block times the rows of the same sequences (``block_rows``), parallel over the
  rows, each over its sequence's columns.

What they replace (and what still runs outside ``jit`` and for other dtypes) are scatters
of every packed row or block entry into its sequence, which the loop level runs as one
serial loop, and searches of the offsets per row.  Inside ``jit`` the sum runs 2-5.5x
faster, the block product 8-10x (benchmarks/RESULTS.md, session 14).

Each kernel is written once over an element type ``T`` (and a combining function
``COMBINE``) that each copy of the function gets in its globals (``_kernel``); the
reductions' three (``_tile_map``, ``_tile_reduce``, ``_combine_tiles``) run in every call,
the first two with nothing to do when no sequence is longer than a tile.  Gradients go
through ``rj.custom_vjp``: a reduction's with the scatter's rule (the cotangent of a sum
spread back over each sequence's rows; of a max or min shared among the rows that attain
it, and the empty sequence's identity, as the scatter shares it); the block product's in
``ragged_block``.
"""
from __future__ import annotations

import functools
import types

import numpy as np

from . import numpy as rnp
from . import pykernel
from .ad_custom import custom_vjp
from .pykernel import call_tir, kernel
from .structs import ShapeDtypeStruct

# element types with a kernel (the others take the scatter)
DTYPES = ("float32", "float64", "int32", "int64")

# the kernels' buffers: the rows (t packed rows of d values), the offsets, the identity and
# the result; T, the element type, is bound in each kernel's copy (``_kernel``)
ROWS, OFFSETS, ONE, RESULT, T = ("t", "d"), ("b1",), (1,), ("b", "d"), "float32"
PACKED = ("t",)
COMBINE = np.add
# a reduction's rows in tiles of at most this many (each sequence's), the tiles in parallel
TILE_ROWS = 128
TILES, PARTS = ("T",), ("T", "d")
# a ragged block's entries (P of them, nh values each: its inner dims) and the tokens' rows
# (nh x nd values: the block's inner dims, then the rest)
ENTRIES, TOKENS = ("P", "nh"), ("t", "nh", "nd")


def _tile_map(off: pykernel.Buffer[OFFSETS, np.int64], toff: pykernel.Buffer[OFFSETS, np.int64],
              tseq: pykernel.Buffer[TILES, np.int64]):
    # the rows of each sequence longer than TILE_ROWS in tiles of TILE_ROWS: where its tiles
    # begin in the list of all the tiles, and each tile's sequence (a shorter sequence has
    # none: it is reduced whole); one serial pass over the sequences and tiles
    toff[0] = 0
    for s in range(off.shape[0] - 1):
        n = off[s + 1] - off[s]
        toff[s + 1] = toff[s] + ((n + TILE_ROWS - 1) // TILE_ROWS if n > TILE_ROWS else 0)
        for g in range(toff[s], toff[s + 1]):
            tseq[g] = s


def _tile_reduce(x: pykernel.Buffer[ROWS, T], off: pykernel.Buffer[OFFSETS, np.int64],
                 toff: pykernel.Buffer[OFFSETS, np.int64], tseq: pykernel.Buffer[TILES, np.int64],
                 init: pykernel.Buffer[ONE, T], part: pykernel.Buffer[PARTS, T]):
    # the tiles of the sequences longer than one tile, all in parallel: work split by rows,
    # not by sequences (CoRa's load balancing), each into its row of partial results
    for g in range(toff[toff.shape[0] - 1]):
        s = tseq[g]
        i0 = off[s] + (g - toff[s]) * TILE_ROWS
        for j in range(x.shape[1]):
            part[g, j] = init[0]
        for i in range(i0, min(i0 + TILE_ROWS, off[s + 1])):
            for j in range(x.shape[1]):
                part[g, j] = COMBINE(part[g, j], x[i, j])


def _combine_tiles(x: pykernel.Buffer[ROWS, T], off: pykernel.Buffer[OFFSETS, np.int64],
                   part: pykernel.Buffer[PARTS, T], toff: pykernel.Buffer[OFFSETS, np.int64],
                   init: pykernel.Buffer[ONE, T], out: pykernel.Buffer[RESULT, T]):
    # each sequence, in parallel: its tiles' partial results combined, or (a sequence of
    # TILE_ROWS rows at most, no tiles) its rows
    for s in range(out.shape[0]):
        for j in range(x.shape[1]):
            out[s, j] = init[0]
        if toff[s + 1] > toff[s]:
            for g in range(toff[s], toff[s + 1]):
                for j in range(x.shape[1]):
                    out[s, j] = COMBINE(out[s, j], part[g, j])
        else:
            for i in range(off[s], off[s + 1]):
                for j in range(x.shape[1]):
                    out[s, j] = COMBINE(out[s, j], x[i, j])


def _segment_of_rows(off: pykernel.Buffer[OFFSETS, np.int64], ids: pykernel.Buffer[PACKED, np.int64]):
    for s in pykernel.prange(off.shape[0] - 1):       # the sequences' rows are disjoint
        for i in range(off[s], off[s + 1]):
            ids[i] = s


def _block_rows(p: pykernel.Buffer[ENTRIES, T], off: pykernel.Buffer[OFFSETS, np.int64],
                boff: pykernel.Buffer[OFFSETS, np.int64], ids: pykernel.Buffer[PACKED, np.int64],
                v: pykernel.Buffer[TOKENS, T], out: pykernel.Buffer[TOKENS, T]):
    # every packed row r, in parallel (its own output row): row i of its sequence s, the
    # sum over the sequence's columns j of p[s][i, j] * v[s][j], the loop's extent the
    # sequence's length (CoRa's variable loops); work is split by rows, not by sequences,
    # so one long sequence spreads over the threads
    for r in range(v.shape[0]):
        s = ids[r]
        n = off[s + 1] - off[s]
        row = boff[s] + (r - off[s]) * n
        for j in range(n):
            for c in range(p.shape[1]):
                w = p[row + j, c]
                for e in range(v.shape[2]):
                    out[r, c, e] = out[r, c, e] + w * v[off[s] + j, c, e]


# each kernel's function, and what it binds: COMBINE, a reduction's combining function
_COMBINES = (("add", np.add), ("max", max), ("min", min))
_SOURCES = {"ids": (_segment_of_rows, {}), "tile_map": (_tile_map, {}),
            **{f"{step}_{m}": (source, {"COMBINE": c}) for m, c in _COMBINES
               for step, source in (("tiles", _tile_reduce), ("combine", _combine_tiles))},
            "block_rows": (_block_rows, {})}


@functools.lru_cache(maxsize=None)
def _kernel(mode: str, dtype: str):
    """The kernel of reduction ``mode`` over elements of ``dtype``: its function above with
    ``T`` (and ``COMBINE``) bound in its globals (the annotations are strings, evaluated
    there; the kernel language reads globals when it parses the body)."""
    fn, binds = _SOURCES[mode]
    copy = types.FunctionType(fn.__code__, {**fn.__globals__, "T": dtype, **binds}, fn.__name__)
    copy.__annotations__ = dict(fn.__annotations__)
    return kernel(copy)


def has_kernel(dtype, floating: bool = False) -> bool:
    """Whether the kernels here take ``dtype`` (``floating``: the products, float only)."""
    return np.dtype(dtype).name in (DTYPES[:2] if floating else DTYPES)


def _flat(values) -> tuple:
    """``values`` as (rows, width): the inner dims in one axis (a view), and the width."""
    width = 1
    for d in values.shape[1:]:                   # symbolic inner dims multiply in as dims
        width = width * d
    return values.reshape((values.shape[0], width)), width


def _run(mode: str, values, offsets, init):
    """(batch, *inner): each sequence's rows of ``values`` combined by ``mode`` from ``init``."""
    dtype = np.dtype(values.dtype).name
    inner = tuple(values.shape[1:])
    flat, width = _flat(values)
    start = rnp.full((1,), init, dtype=dtype)
    batch = offsets.shape[0] - 1

    toff, tseq = call_tir(_kernel("tile_map", "int64"), offsets,
                          out=[ShapeDtypeStruct(tuple(offsets.shape), "int64"),
                               # at most 2 t / TILE_ROWS tiles: ceil(n / R) <= 2 n / R for n > R
                               ShapeDtypeStruct((flat.shape[0] // (TILE_ROWS // 2),), "int64")])
    part = call_tir(_kernel(f"tiles_{mode}", dtype), flat, offsets, toff, tseq, start,
                    out=ShapeDtypeStruct(tuple(tseq.shape) + (width,), dtype))
    out = call_tir(_kernel(f"combine_{mode}", dtype), flat, offsets, part, toff, start,
                   out=ShapeDtypeStruct((batch, width), dtype))
    return out.reshape((batch,) + inner)


@functools.lru_cache(maxsize=None)
def _differentiable(mode: str, init) -> custom_vjp:
    """``_run`` for one mode and identity, with the scatter's reverse-mode rule."""
    def reduce(values, offsets):
        return _run(mode, values, offsets, init)

    def fwd(values, offsets):
        out = _run(mode, values, offsets, init)
        return out, (values, offsets, out)

    def bwd(res, ct):
        values, offsets, out = res
        ids = segment_ids(offsets, values.shape[0])
        if mode == "add":
            return rnp.take(ct, ids, axis=0), None
        # shared equally among the rows attaining the result and the identity when it does
        # (the scatter's rule: its accumulator starts at the identity)
        hit = (values == rnp.take(out, ids, axis=0)).astype(values.dtype)
        hits = _run("add", hit, offsets, 0) + (out == init).astype(values.dtype)
        return rnp.take(ct / hits, ids, axis=0) * hit, None

    f = custom_vjp(reduce)
    f.defvjp(fwd, bwd)
    return f


def segment_ids(offsets, total):
    """Inside ``jit``: each of the ``total`` packed rows' sequence, written by a loop over
    each sequence's rows (a search of the offsets per row took 5 ms for 48 130 rows in 1 024
    sequences, the loops 0.04 ms)."""
    return call_tir(_kernel("ids", "int64"), offsets, out=ShapeDtypeStruct((total,), "int64"))


def block_rows(p, v, offsets, block_offsets):
    """Inside ``jit``: ``p_b @ v_b`` for every sequence, ``p`` a ragged block's packed
    entries ``(P, *heads)`` and ``v`` the packed rows ``(t, *heads, *rest)`` of the same
    sequences (float32 or float64, one dtype): ``(t, *heads, *rest)``, one loop nest whose
    extents are each sequence's length, no temporary of the entries times the rows."""
    dtype = np.dtype(p.dtype).name
    heads = tuple(p.shape[1:])
    pf, nh = _flat(p)
    rest = 1
    for d in v.shape[1 + len(heads):]:
        rest = rest * d
    vf = v.reshape((v.shape[0], nh, rest))
    ids = segment_ids(offsets, v.shape[0])
    out = call_tir(_kernel("block_rows", dtype), pf, offsets, block_offsets, ids, vf,
                   out=ShapeDtypeStruct(tuple(vf.shape), dtype))
    return out.reshape(tuple(v.shape))


def segment_reduce(mode: str, values, offsets, init):
    """Inside ``jit``: the rows of each sequence of ``values`` (packed, ``offsets``) combined
    by ``mode`` (add / max / min) from ``init``: (batch, *inner), on the variable loops."""
    return _differentiable(mode, init)(values, offsets)
