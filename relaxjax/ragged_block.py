"""Ragged x ragged blocks as values: per sequence ``b`` a ``len[b] x len[b]`` matrix (times
the inner dims), packed without padding (issue 20's CoRa-style ragged tensors).

A :class:`RaggedBlock` is what ``q_b @ k_b.T`` gives for every sequence of two ragged arrays
holding the same sequences (:func:`matmul_t`), so attention can be written by hand on ragged
``q``, ``k``, ``v`` with nothing padded::

    s = ragged.matmul_t(q, k) * scale      # (batch, len, len[, heads]) packed
    s = ragged.causal_mask(s)              # key j <= query i, per sequence
    p = ragged.softmax(s, axis=2)          # within each row of each block
    o = p @ v                              # a RaggedArray of q's sequences

Layout.  ``values`` holds the blocks one after the other, each row-major: entry ``(i, j)``
of sequence ``b`` is ``values[block_offsets[b] + i * len[b] + j]``, of shape ``inner``.
``block_offsets`` (``batch + 1`` int64s, the running sum of ``len[b] ** 2``) is computed
once from the sequence ``offsets`` when a block is made and travels with it: the pytree's
children are ``values``, ``offsets`` and ``block_offsets``.  The block's axes are
``(batch, row, col, *inner)``, as ``to_padded`` shows them: axis 1 runs over a sequence's
queries (rows), axis 2 over its keys (columns), then the inner dims (the heads when ``q``
and ``k`` have inner shape ``(heads, head_dim)``).  Axes count as NumPy's do on that padded
form, so ``axis=-1`` is the column axis only for a block without inner dims; with heads,
the keys are ``axis=2``.

Inside ``jit``.  The number of packed entries, ``sum(len[b] ** 2)``, is not a polynomial of
the argument dims (only ``batch`` and ``total = sum(len[b])`` are dims): it is a value of the
offsets.  The library's data-dependent dims cover it: ``lax.iota_count`` makes the entry
numbers ``0 .. P - 1`` with ``P`` a dim bound when the program runs (the way ``while_loop``'s
derivative sizes its stack).  From them every op is a gather or a scatter over index
arrays made once per block: each entry's sequence (a scatter of the block starts and a
cumulative sum: ``O(P + batch)``, not a search), its row ``i`` and column ``j``, and the
packed rows ``offsets[b] + i`` and ``offsets[b] + j`` of the tokens it pairs.  So:

- :func:`matmul_t` gathers the two tokens of each entry and sums their product over the
  last inner axis;
- reductions and :meth:`RaggedBlock.softmax` over the columns (rows) are segment
  reductions, a scatter at each entry's row (column);
- ``block @ v`` (a ``RaggedArray`` again): inside ``jit``, for float32/float64, a loop
  nest parallel over the packed rows, each summing ``p[i, j] * v[j]`` over its sequence's
  columns, the loop's extent the sequence's length read from the offsets (CoRa's variable
  loops, ``ragged_segments.block_rows``); elsewhere a scatter of those products.

These are primitives every backend runs (``take``, ``scatter``, ``cumsum``, the host-side
``iota_count``, loop-level programs), so blocks work on every backend, eagerly on NumPy
arrays too, and one compile serves every batch of every lengths.  The cost: ``matmul_t``'s
gathers fuse with its sum (one kernel, no temporary); the variable loops of ``@`` run
8-10x faster than the scatter of every entry's product (benchmarks/RESULTS.md, session 14),
still 4-5x slower than the varlen attention kernel.

Two blocks from separate ``matmul_t`` calls have unrelated run-time dims: an op on both
compares their offsets when it runs and asserts (``match_cast``) the second's entry count
to be the first's.

Not here: a block of two different sequence sets (cross attention between ragged batches
runs fused, ``ragged.dot_product_attention`` with keys of their own sequences), a column axis of another length than the rows, reductions over the batch axis,
``keepdims`` over a ragged axis (the result is a ``RaggedArray``; :meth:`RaggedBlock.expand`
spreads it back over a block), and one fused kernel for attention written this way.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import optree

from . import lax
from . import nn
from . import numpy as rnp
from .core import Tracer, current_trace
from .lax import check_equal
from .ad_custom import custom_vjp
from .ragged_segments import block_rows, has_kernel
from .ragged_array import PackedOperators, RaggedArray, _filled, _rows_like, note_ragged, _same_offsets, _same_sequences, _traced

__all__ = ["RaggedBlock", "matmul_t", "causal_mask"]


class _Index(NamedTuple):
    """Per packed entry (all ``(P,)`` int64): its sequence, row and column within the
    sequence, and the packed rows of the query and key tokens it pairs."""
    seq: object
    i: object
    j: object
    row: object
    col: object


def _block_offsets(offsets):
    """``[0, len[0]**2, len[0]**2 + len[1]**2, ...]``: where each sequence's block starts."""
    n = offsets[1:] - offsets[:-1]
    return rnp.concatenate([rnp.zeros(1, "int64"), rnp.cumsum(n * n)])


def _index(offsets, block_offsets, entries) -> _Index:
    """The index arrays of the entries ``0 .. P - 1`` (``entries``, ``(P,)`` int64)."""
    n = offsets[1:] - offsets[:-1]
    # each block start (but the first) marks its entry, so the running count of marks is
    # the entry's sequence: an empty sequence's start equals the next one's (two marks,
    # skipping it), and starts at P (trailing empty sequences) fall off the end (dropped)
    marks = lax.scatter.bind(_filled(entries, entries.shape, 0, "int64"), block_offsets[1:], rnp.ones_like(n),
                             axis=0, mode="add", oob="drop")
    seq = rnp.cumsum(marks)
    local = entries - rnp.take(block_offsets, seq, axis=0)
    width = rnp.take(n, seq, axis=0)                    # >= 1: an empty sequence has no entries
    i = rnp.floor_divide(local, width)
    j = local - i * width
    start = rnp.take(offsets, seq, axis=0)
    return _Index(seq, i, j, start + i, start + j)


def _expand_trailing(x, rank: int):
    """``x`` (``(P, *inner)``) with singleton axes after its inner dims up to ``rank`` inner
    dims: a block of fewer inner dims broadcasts over the missing trailing ones."""
    extra = rank - (len(x.shape) - 1)
    return x[(Ellipsis,) + (None,) * extra] if extra > 0 else x


class RaggedBlock(PackedOperators):
    """Per sequence ``b`` a ``len[b] x len[b]`` block of rows of shape ``inner``, packed (see
    the module).  Make one with :func:`matmul_t`, :meth:`from_list` or :meth:`from_parts`."""
    __slots__ = ("values", "offsets", "block_offsets", "_shared")
    _PACKING = ("ragged block", "entries", "blocks")   # (for _check_packing's message)

    def __init__(self, values, offsets, block_offsets):
        # no checks: the pytree rebuilds blocks from whatever stands for the leaves
        self.values, self.offsets, self.block_offsets = values, offsets, block_offsets
        note_ragged(values, offsets, "block")
        # what the blocks computed from this one share, made on first use: "index" (the
        # index arrays) and "tokens" (the packed token rows, a dim inside jit)
        self._shared: dict = {}

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_parts(cls, values, offsets) -> "RaggedBlock":
        """Blocks packed in ``values`` (``(sum(len[b] ** 2), *inner)``) of the sequences of
        ``offsets`` (a ragged array's); the block offsets are computed here."""
        if isinstance(offsets, RaggedArray):
            offsets = offsets.offsets
        if not _traced(values, offsets):
            values, offsets = np.asarray(values), np.asarray(offsets)
            if offsets.ndim != 1 or offsets.size == 0 or not np.issubdtype(offsets.dtype, np.integer) \
                    or offsets[0] != 0 or np.any(np.diff(offsets) < 0):
                raise ValueError(f"ragged block: offsets must be a 1-d integer array running from 0 without "
                                 f"decreasing, got {offsets.tolist()}")
            offsets = offsets.astype(np.int64)
            boff = _block_offsets(offsets)
            if values.ndim == 0 or values.shape[0] != boff[-1]:
                raise ValueError(f"ragged block: sequences of lengths {np.diff(offsets).tolist()} need "
                                 f"{int(boff[-1])} packed entries (the sum of the squared lengths), "
                                 f"got values of shape {values.shape}")
            return cls(values, offsets, boff)
        offsets = rnp.asarray(offsets).astype("int64")
        return cls(values, offsets, _block_offsets(offsets))

    @classmethod
    def from_list(cls, blocks: Sequence) -> "RaggedBlock":
        """Blocks given one by one: NumPy arrays of shape ``(n_b, n_b, *inner)``, one inner
        shape for all (outside ``jit``)."""
        blocks = [np.asarray(a) for a in blocks]
        if not blocks:
            raise ValueError("ragged block from_list: no blocks (give at least one, possibly 0 x 0)")
        if any(a.ndim < 2 or a.shape[0] != a.shape[1] for a in blocks) or len({a.shape[2:] for a in blocks}) != 1:
            raise ValueError(f"ragged block from_list: blocks must be square in their first two axes with "
                             f"one inner shape, got {[a.shape for a in blocks]}")
        lengths = [a.shape[0] for a in blocks]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        values = np.concatenate([a.reshape((-1,) + a.shape[2:]) for a in blocks])
        return cls.from_parts(values, offsets)

    def _like(self, values) -> "RaggedBlock":
        """This block's sequences (and index arrays) holding ``values`` (``(P, *inner)``)."""
        self._check_packing(values)
        out = RaggedBlock(values, self.offsets, self.block_offsets)
        out._shared = self._shared
        return out

    # -- structure (batch, lengths: each block is lengths[b] x lengths[b]) ------------------
    @property
    def ndim(self) -> int:
        """``(batch, row, col, *inner)``."""
        return 2 + self.values.ndim

    def __repr__(self) -> str:
        inner = ", ".join(str(d) for d in self.inner_shape)
        return (f"RaggedBlock(batch={self.batch}, blocks=lengths x lengths, inner=({inner}), "
                f"dtype={self.dtype}, entries={self.values.shape[0]})")

    def index(self) -> _Index:
        """The index arrays of the packed entries (made once per block and shared by the
        blocks computed from it)."""
        if "index" not in self._shared:
            if _traced(self.values, self.offsets, self.block_offsets):
                rows = self.values.shape[0]
                entries = rnp.arange(rows)
                # a block from outside (an argument): its entry count must be what its
                # block offsets say, or the gathers would read past the tokens
                # (the count as an array a kernel makes: a host op takes no symbolic constant)
                check_equal.bind(self.block_offsets[-1:], rnp.full((1,), rows, dtype="int64"),
                                 what="ragged block: the block offsets' last entry and the packed entries")
            else:
                entries = np.arange(np.shape(self.values)[0], dtype=np.int64)
            self._shared["index"] = _index(self.offsets, self.block_offsets, entries)
        return self._shared["index"]

    def positions(self) -> tuple["RaggedBlock", "RaggedBlock"]:
        """Two int64 blocks holding each entry's row ``i`` and column ``j`` (positions in its
        sequence): masks by position, e.g. ``i >= j`` (causal) or ``abs(i - j) <= w``."""
        idx = self.index()
        return self._like(idx.i), self._like(idx.j)

    def _tokens(self) -> tuple:
        """The packed token rows of the sequences (``offsets[-1]``) as a dim: the one the block
        was made from where known, else a run-time dim (a block passed into ``jit``), with
        an array of that length to make arrays of it from (``_filled``), else None."""
        if "tokens" not in self._shared:
            if _traced(self.offsets):
                tokens = lax.iota_count(self.offsets[-1])
                self._shared["tokens"] = (tokens.shape[0], tokens)
            else:
                self._shared["tokens"] = (int(np.asarray(self.offsets)[-1]), None)
        return self._shared["tokens"]

    # -- elementwise -----------------------------------------------------------------------
    @classmethod
    def __relaxjax_ufunc__(cls, fn, args):
        """``relaxjax.numpy``'s elementwise ``fn`` on block (and dense) ``args``: on the
        packed values.  Blocks must hold the same sequences; one of fewer inner dims
        broadcasts over the missing trailing ones (a mask without heads, for every head);
        dense operands broadcast over the inner dims, as NumPy aligns trailing axes."""
        name = getattr(fn, "__name__", "elementwise")
        blocks = [a for a in args if isinstance(a, RaggedBlock)]
        first = max(blocks, key=lambda b: len(b.inner_shape))
        rank = len(first.inner_shape)
        at = next(k for k, a in enumerate(args) if a is first)
        vals = []
        for k, a in enumerate(args):
            if isinstance(a, RaggedBlock):
                v = a.values if a is first else _entries_like(first, a, f"ragged block {name}: operands {at} and {k}")
                vals.append(_expand_trailing(v, rank))
            elif isinstance(a, RaggedArray):
                raise ValueError(f"ragged block {name}: operand {k} is a RaggedArray, whose rows do not line "
                                 f"up with a block's entries; spread it over the block first with "
                                 f"block.expand(r, axis=2) (r[b, i] along each row) or axis=1 (r[b, j] down "
                                 f"each column)")
            else:
                nd = a.ndim if isinstance(a, Tracer) else np.ndim(a)
                if nd > rank:
                    raise ValueError(f"ragged block {name}: a dense operand of rank {nd} does not broadcast "
                                     f"over the inner dims {first.inner_shape} of a ragged block")
                vals.append(a)
        return first._like(fn(*vals))

    def astype(self, dtype) -> "RaggedBlock":
        return self._like(rnp.asarray(self.values).astype(dtype))

    def masked(self, keep: "RaggedBlock", fill=None) -> "RaggedBlock":
        """Entries where ``keep`` (a bool block of the same sequences, inner dims a prefix of
        this block's) is true, ``fill`` elsewhere (default: ``-inf``, or the integer type's
        least value: what a softmax or a max then ignores)."""
        if not isinstance(keep, RaggedBlock):
            raise TypeError(f"ragged block masked: keep must be a RaggedBlock of bools (e.g. from "
                            f"positions()), got {type(keep).__name__}")
        k = _entries_like(self, keep, "ragged block masked: the block and keep")
        k = _expand_trailing(k, len(self.inner_shape))
        return self._like(rnp.where(k, self.values, _fill(self.dtype, fill)))

    def expand(self, r: RaggedArray, axis: int = 2) -> "RaggedBlock":
        """A ragged array ``r`` of the same sequences spread over this block's entries:
        ``axis=2`` gives entry ``(b, i, j)`` the value ``r[b, i]`` (what ``keepdims=True`` over
        the columns would broadcast), ``axis=1`` the value ``r[b, j]``."""
        if not isinstance(r, RaggedArray):
            raise TypeError(f"ragged block expand: a RaggedArray of the block's sequences, got {type(r).__name__}")
        a = axis + self.ndim if axis < 0 else axis
        if a not in (1, 2):
            raise ValueError(f"ragged block expand: axis {axis} is not a ragged axis (1: down the columns, "
                             f"2: along the rows)")
        _same_offsets(self, r, "ragged block expand: the block and r")
        idx = self.index()
        return self._like(rnp.take(r.values, idx.row if a == 2 else idx.col, axis=0))

    @property
    def T(self) -> "RaggedBlock":
        """Each sequence's block transposed (rows and columns swapped; inner dims kept)."""
        return self.transpose()

    def transpose(self) -> "RaggedBlock":
        """Each sequence's block transposed: entry ``(i, j)`` becomes ``(j, i)``."""
        idx = self.index()
        n = rnp.take(self.lengths, idx.seq, axis=0)
        src = rnp.take(self.block_offsets, idx.seq, axis=0) + idx.j * n + idx.i
        return self._like(rnp.take(self.values, src, axis=0))

    # -- products ----------------------------------------------------------------------------
    def __matmul__(self, v):
        """``p_b @ v_b`` for every sequence: ``v`` a RaggedArray of the same sequences whose
        inner shape starts with this block's (``(heads, d)`` for a block of heads; any for a
        block without inner dims), giving a RaggedArray of ``v``'s inner shape."""
        if not isinstance(v, RaggedArray):
            raise NotImplementedError(f"ragged block @ {type(v).__name__}: a block's column axis is ragged, so "
                                      f"only a RaggedArray of the same sequences can multiply it")
        inner, vinner = self.inner_shape, v.inner_shape
        what = (f"ragged block @ ragged: the value's inner shape {vinner} must start with the block's {inner} "
                f"(the heads)")
        if len(vinner) < len(inner):
            raise ValueError(what)
        _require_same_dims(_inner_dims(self.values), _inner_dims(v.values)[:len(inner)], what)
        _same_offsets(self, v, "ragged block @ ragged: the block and v")
        if _traced(self.values, v.values) and self.dtype == v.dtype and has_kernel(self.dtype, floating=True):
            return v.with_values(_block_times_rows(self.values, v.values, self.offsets, self.block_offsets))
        idx = self.index()
        p = _expand_trailing(self.values, len(vinner))
        prod = p * rnp.take(v.values, idx.col, axis=0)                    # (P, *v.inner)
        out = rnp.zeros(tuple(v.values.shape), rnp.result_type(prod))
        return v.with_values(lax.scatter.bind(out, idx.row, prod, axis=0, mode="add", oob="drop"))

    # -- reductions ------------------------------------------------------------------------
    def _axis(self, axis, what: str):
        """An axis of ``(batch, row, col, *inner)``: 1 or 2 (ragged), (1, 2) (the whole
        block), or an inner one as an axis of ``values`` (``("inner", k)``)."""
        n = self.ndim
        if isinstance(axis, tuple):
            axes = tuple(sorted(a + n if a < 0 else a for a in axis))
            if axes == (1, 2):
                return axes
            raise NotImplementedError(f"ragged block {what}: axis {axis}: one axis, or (1, 2) for each "
                                      f"whole block")
        a = axis + n if axis < 0 else axis
        if not 0 <= a < n:
            raise np.exceptions.AxisError(f"ragged block {what}: axis {axis} is out of bounds for a ragged "
                                          f"block of {n} dims (batch, row, col, *inner)")
        if a == 0:
            raise NotImplementedError(f"ragged block {what} over the batch axis (0): reduce over the rows "
                                      f"or columns (1, 2) first")
        return a if a in (1, 2) else ("inner", a - 2)

    def _segments(self, mode: str, a):
        """The entries combined by ``mode`` (add / max / min) per row (``a == 2``), per column
        (``a == 1``) or per sequence (``a == (1, 2)``): the accumulator and the dtype."""
        idx = self.index()
        if a == (1, 2):
            ids, count, dep = idx.seq, self.batch, None
        else:
            ids = idx.row if a == 2 else idx.col
            count, dep = self._tokens()
        dtype = self.dtype
        if mode == "add":
            dtype = np.add.reduce(np.zeros(1, dtype)).dtype     # NumPy's sum dtype (ints: int64)
            init = 0
        else:
            init = _fill(dtype, None) if mode == "max" else _fill(dtype, None, largest=True)
        acc = _filled(dep, (count,) + self.inner_shape, init, dtype)
        return lax.scatter.bind(acc, ids, rnp.asarray(self.values).astype(dtype), axis=0, mode=mode, oob="drop")

    def _reduced(self, out, a):
        """A reduction's result: over a ragged axis a RaggedArray, over both a dense array."""
        return out if a == (1, 2) else RaggedArray(out, self.offsets)

    def _check_keepdims(self, keepdims: bool, what: str):
        if keepdims:
            raise NotImplementedError(f"ragged block {what}(keepdims=True) over a ragged axis: the result is a "
                                      f"RaggedArray (or per sequence); spread it back with block.expand(r, "
                                      f"axis), or use ragged.softmax for a softmax")

    def _dense_part(self, what: str, dense, axis, keepdims: bool) -> tuple:
        """``what`` (NumPy's ``dense``) over all entries or an inner axis (a block again):
        (the result, None); over ragged axes (keepdims refused there): (None, the axes)."""
        if axis is None:
            return dense(self.values), None
        a = self._axis(axis, what)
        if isinstance(a, tuple) and a[0] == "inner":
            return self._like(dense(self.values, axis=a[1], keepdims=keepdims)), None
        self._check_keepdims(keepdims, what)
        return None, a

    def sum(self, axis=None, keepdims: bool = False):
        """Over all entries (``axis=None``), an inner axis (a block), the columns (``axis=2``:
        a RaggedArray of each row's sum) or rows (``axis=1``), or ``(1, 2)`` ((batch, *inner))."""
        out, a = self._dense_part("sum", rnp.sum, axis, keepdims)
        return out if a is None else self._reduced(self._segments("add", a), a)

    def mean(self, axis=None, keepdims: bool = False):
        """As :meth:`sum`, divided by the count (an empty sequence's mean over ``(1, 2)``:
        nan, as NumPy's of an empty array)."""
        out, a = self._dense_part("mean", rnp.mean, axis, keepdims)
        if a is None:
            return out
        total = self._segments("add", a)
        if a == (1, 2):
            count = self.lengths * self.lengths
        else:       # a row (column) of sequence b has len[b] entries: counted like the sum
            ones = _filled(self.index().seq, self.values.shape[:1], 1, "int64")
            count = self._like(ones)._segments("add", a)
        count = count.reshape((-1,) + (1,) * len(self.inner_shape))
        mean_dtype = np.mean(np.zeros(1, self.dtype)).dtype
        with np.errstate(invalid="ignore", divide="ignore"):       # 0 / 0: an empty sequence's, nan
            out = rnp.true_divide(total, count).astype(mean_dtype)
        return self._reduced(out, a)

    def _extremum(self, mode: str, axis, keepdims: bool):
        # every row and column has an entry; an empty sequence's whole-block extremum is the
        # identity (-inf for max, inf for min, as RaggedArray's over its ragged axis)
        out, a = self._dense_part(mode, rnp.max if mode == "max" else rnp.min, axis, keepdims)
        return out if a is None else self._reduced(self._segments(mode, a), a)

    def max(self, axis=None, keepdims: bool = False):
        return self._extremum("max", axis, keepdims)

    def min(self, axis=None, keepdims: bool = False):
        return self._extremum("min", axis, keepdims)

    def softmax(self, axis: int = -1) -> "RaggedBlock":
        """Softmax within each row (``axis=2``: over the keys, as attention's), each column
        (``axis=1``) or over an inner axis.  A row whose entries are all ``-inf`` gives nan,
        as NumPy's would."""
        a = self._axis(axis, "softmax")
        if isinstance(a, tuple):
            if a == (1, 2):
                raise NotImplementedError("ragged block softmax over (1, 2): one axis (2 for attention's rows)")
            return self._like(nn.softmax(self.values, axis=a[1]))
        ids = self.index().row if a == 2 else self.index().col
        top = rnp.take(self._segments("max", a), ids, axis=0)
        e = rnp.exp(self.values - top)
        total = rnp.take(self._like(e)._segments("add", a), ids, axis=0)
        return self._like(e / total)

    # -- conversions -----------------------------------------------------------------------
    def to_padded(self, fill=0, max_len=None):
        """``(batch, max_len, max_len, *inner)``: sequence b's block in the top-left corner of
        row b, ``fill`` elsewhere.  ``max_len`` (an int or a dim) is needed inside ``jit``,
        where the longest length is a value, not a shape; outside it defaults to the longest."""
        if max_len is None:
            if _traced(self.values, self.offsets):
                raise ValueError("ragged block to_padded inside jit needs max_len= (an int or a dim): the "
                                 "longest length is a value of the offsets, not a shape")
            lengths = np.asarray(self.lengths)
            max_len = int(lengths.max()) if lengths.size else 0
        entries = self.values.shape[0]
        t = rnp.arange(max_len)
        n = self.lengths[:, None, None]
        i, j = t[None, :, None], t[None, None, :]
        valid = (i < n) & (j < n)                                              # (batch, L, L)
        at = self.block_offsets[:-1, None, None] + i * n + j
        # a position outside the block reads the extra entry after the values (an empty block works)
        values = rnp.concatenate([self.values, rnp.zeros((1,) + self.inner_shape, self.dtype)])
        got = rnp.take(values, rnp.where(valid, at, entries), axis=0)
        mask = valid.reshape(valid.shape + (1,) * len(self.inner_shape))
        return rnp.where(mask, got, rnp.asarray(fill, dtype=self.dtype))

    def to_list(self) -> list:
        """Each sequence's block as a NumPy array ``(len[b], len[b], *inner)`` (outside ``jit``)."""
        if _traced(self.values, self.offsets):
            raise ValueError("ragged block to_list inside jit: return the block and call to_list on the result")
        values, boff = np.asarray(self.values), np.asarray(self.block_offsets)
        lengths = np.diff(np.asarray(self.offsets))
        return [values[boff[b]:boff[b + 1]].reshape((n, n) + values.shape[1:]) for b, n in enumerate(lengths)]


optree.register_pytree_node(RaggedBlock, lambda s: ((s.values, s.offsets, s.block_offsets), None,
                                                    ("values", "offsets", "block_offsets")),
                            lambda _, children: RaggedBlock(*children),
                            namespace=getattr(optree.registry, "__GLOBAL_NAMESPACE"))


def _inner_dims(x) -> tuple:
    """The inner dims of packed values (axes 1 on) as the shape env takes them."""
    return tuple(x.type.shape[1:]) if isinstance(x, Tracer) else tuple(np.shape(x)[1:])


def _require_same_dims(a: tuple, b: tuple, what: str) -> None:
    """Dims pairwise equal: ints compared now, symbolic ones proved (or guarded) by the trace."""
    for k, (x, y) in enumerate(zip(a, b)):
        if isinstance(x, int) and isinstance(y, int):
            if x != y:
                raise ValueError(f"{what}: {a} and {b} differ on inner axis {k}")
        else:
            current_trace().env.require_eq(x, y, f"{what}: inner axis {k}")


def _fill(dtype, fill, largest: bool = False):
    """``fill``, or the least (``largest``: the greatest) value of ``dtype``: -inf for floats."""
    if fill is not None:
        return fill
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating):
        return np.inf if largest else -np.inf
    if dtype == np.bool_:
        return bool(largest)
    return np.iinfo(dtype).max if largest else np.iinfo(dtype).min


def _entries_like(a: RaggedBlock, b: RaggedBlock, what: str):
    """``b``'s values with ``a``'s packed entries: the offsets compared, and inside ``jit`` the
    entry count of a block made elsewhere (an unrelated run-time dim) asserted to be ``a``'s."""
    _same_offsets(a, b, what)
    return _rows_like(a, b, f"{what}: packed entries")


@custom_vjp
def _block_times_rows(p, v, offsets, block_offsets):
    """``p_b @ v_b`` per sequence on the variable loops (``ragged_segments.block_rows``),
    with its reverse-mode rule: ``p``'s cotangent is the cotangent's row times ``v``'s
    column per entry (as :func:`matmul_t` makes scores), ``v``'s the transposed blocks
    times the cotangent (the same loops)."""
    return block_rows(p, v, offsets, block_offsets)


def _block_times_rows_fwd(p, v, offsets, block_offsets):
    return block_rows(p, v, offsets, block_offsets), (p, v, offsets, block_offsets)


def _block_times_rows_bwd(res, ct):
    p, v, offsets, block_offsets = res
    idx = _index(offsets, block_offsets, rnp.arange(p.shape[0]))
    heads = len(p.shape) - 1
    prod = rnp.take(ct, idx.row, axis=0) * rnp.take(v, idx.col, axis=0)       # (P, *heads, *rest)
    dp = rnp.sum(prod, axis=tuple(range(1 + heads, len(prod.shape)))) if len(prod.shape) > 1 + heads else prod
    n = rnp.take(offsets[1:] - offsets[:-1], idx.seq, axis=0)
    p_t = rnp.take(p, rnp.take(block_offsets, idx.seq, axis=0) + idx.j * n + idx.i, axis=0)
    return dp.astype(p.dtype), block_rows(p_t, ct, offsets, block_offsets), None, None


_block_times_rows.defvjp(_block_times_rows_fwd, _block_times_rows_bwd)


def matmul_t(x: RaggedArray, y: RaggedArray) -> RaggedBlock:
    """``x_b @ y_b.T`` for every sequence ``b`` of two ragged arrays holding the same
    sequences: a :class:`RaggedBlock` (attention's scores from ``q`` and ``k``).  The last
    inner axis is contracted and the others (the heads) are kept: inner shapes
    ``(*heads, d)`` give a block of inner shape ``heads``, entry ``(i, j, *h)`` being
    ``sum_d x[b, i, *h, d] * y[b, j, *h, d]``."""
    if not isinstance(x, RaggedArray) or not isinstance(y, RaggedArray):
        raise TypeError(f"ragged matmul_t: x and y must be RaggedArrays (the queries and the keys), got "
                        f"{type(x).__name__} and {type(y).__name__}")
    ix, iy = x.inner_shape, y.inner_shape
    what = (f"ragged matmul_t: the inner shapes of x and y must be equal and end with the axis contracted "
            f"((*heads, d)), got {ix} and {iy}")
    if not ix or len(ix) != len(iy):
        raise ValueError(what)
    _require_same_dims(_inner_dims(x.values), _inner_dims(y.values), what)
    yv = _same_sequences(x, y, "ragged matmul_t: x and y")
    if _traced(x.values, y.values, x.offsets):
        boff = _block_offsets(x.offsets)
        # the entry count sum(len ** 2) is a value of the offsets: a dim bound at run time
        entries = lax.iota_count(boff[-1])
    else:
        boff = _block_offsets(np.asarray(x.offsets))
        entries = np.arange(boff[-1], dtype=np.int64)
    idx = _index(x.offsets, boff, entries)
    prod = rnp.take(x.values, idx.row, axis=0) * rnp.take(yv, idx.col, axis=0)
    # the dtype of NumPy's matmul: the operands' (a sum would widen int32 to int64)
    dtype = np.dtype(rnp.result_type(prod))
    s = rnp.any(prod, axis=-1) if dtype == np.bool_ else rnp.sum(prod, axis=-1, dtype=dtype)
    out = RaggedBlock(s, x.offsets, boff)
    out._shared.update(index=idx, tokens=(x.values.shape[0], None))
    return out


def causal_mask(s: RaggedBlock, fill=None) -> RaggedBlock:
    """``s`` with the entries above each block's diagonal (key ``j`` after query ``i``, both
    counted from the sequence's start) set to ``fill`` (default ``-inf``, or the integer
    type's least value)."""
    if not isinstance(s, RaggedBlock):
        raise TypeError(f"ragged causal_mask: a RaggedBlock (from ragged.matmul_t), got {type(s).__name__}")
    idx = s.index()
    keep = _expand_trailing(idx.j <= idx.i, len(s.inner_shape))
    return s._like(rnp.where(keep, s.values, _fill(s.dtype, fill)))
