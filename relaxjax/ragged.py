"""Ragged arrays: a batch of sequences of different lengths, kept without padding (CoRa,
Fegade et al., MLSys 2022).

A :class:`RaggedArray` is ``values``, the sequences packed one after the other along axis 0
(shape ``(total, *inner)``), and ``offsets`` (``batch + 1`` int64s, ``offsets[b]`` where
sequence ``b`` starts, ``offsets[-1] == total``).  It is a pytree of those two arrays, so it
passes into and out of ``@rj.jit`` functions, where ``total`` and ``batch`` are symbolic dims
like any others: one compile serves every batch of every lengths.

What runs on the packed values needs no padding at all:

- elementwise functions (``relaxjax.numpy``'s ufuncs and the operators), with dense operands
  broadcast over the inner dims: on ``values`` (ragged operands must hold the same
  sequences: their offsets are compared, inside ``jit`` when the function runs);
- ``r @ W`` (a projection): one matrix product over all the packed tokens;
- reductions over inner axes, and ``softmax``/``layer_norm`` over the last one;
- reductions over the ragged axis (``sum``, ``mean``, ``var``, ``max``, ``min`` with
  ``axis=1``, ``keepdims`` too) and :func:`softmax` over it: inside ``jit``, loops whose
  extent is read from the offsets, ``for i in range(off[s], off[s + 1])`` per sequence ``s``
  (CoRa's variable loops, :mod:`relaxjax.ragged_segments`; float32/64, int32/64); outside
  ``jit`` and for other dtypes, scatters into the sequences (:meth:`RaggedArray.segment_ids`);
- reductions over the batch axis (``axis=0``): position ``p`` over the sequences longer than
  ``p`` (NumPy's masked arrays on the padded form), ``(longest, *inner)``.

``to_padded`` gathers into ``(batch, max_len, *inner)``; ``from_padded`` packs back.

:func:`dot_product_attention` is attention within each sequence on the packed values and
the offsets, unpadded (varlen attention: one library call, ``nn.attention_varlen*``, whose
kernels find each work item's sequence from the offsets; no ``max_len`` needed), or, with
keys and values over other sequences of the same batch, cross attention between the two
ragged batches (the keys' offsets beside the queries').

Per-sequence products make ragged x ragged blocks as values (:mod:`relaxjax.ragged_block`,
re-exported here): :func:`matmul_t` (``q_b @ k_b.T``) gives a :class:`RaggedBlock` of
``len[b] x len[b]`` entries per sequence, packed; :func:`causal_mask`, :func:`softmax`,
reductions over its rows or columns, and ``block @ r`` (a ragged array again) run on it, so
attention can be written by hand on ragged ``q``, ``k``, ``v`` without padding.  The
ragged array type itself is in :mod:`relaxjax.ragged_array` (both modules build on it).

Not yet here (issue 20's later steps): a fused kernel for block ops (they are gathers and
scatters over index arrays), blocks between two different sets of sequences (cross
attention is fused, above), the other
ragged ops on variable loops (the block ops, padding), their work split by size rather
than by sequence, and ops that take the ragged type itself (the IR shows it: a ragged
array's packed values, and every value an op on them gives, print as ``ragged f32[b,
len[offsets], *inner]``, but the ops still see the packed values and the offsets).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from . import nn
from . import numpy as rnp
from .ragged_array import RaggedArray, _same_sequences, _traced
from .ragged_block import RaggedBlock, causal_mask, matmul_t

__all__ = ["RaggedArray", "RaggedBlock", "from_lengths", "from_offsets", "from_list", "from_padded", "softmax",
           "dot_product_attention", "matmul_t", "causal_mask"]


def from_offsets(values, offsets) -> RaggedArray:
    """Sequences ``values[offsets[b]:offsets[b + 1]]`` (``offsets``: ``batch + 1`` ints from 0
    to ``len(values)``, non-decreasing; checked outside ``jit``)."""
    if not _traced(values, offsets):
        values, offsets = np.asarray(values), np.asarray(offsets)
        if offsets.ndim != 1 or offsets.size == 0 or not np.issubdtype(offsets.dtype, np.integer):
            raise ValueError(f"ragged from_offsets: offsets must be a 1-d integer array of batch + 1 "
                             f"entries, got shape {offsets.shape} and dtype {offsets.dtype}")
        if offsets[0] != 0 or offsets[-1] != values.shape[0] or np.any(np.diff(offsets) < 0):
            raise ValueError(f"ragged from_offsets: offsets must run from 0 to len(values) = "
                             f"{values.shape[0]} without decreasing, got {offsets.tolist()}")
        return RaggedArray(values, offsets.astype(np.int64))
    return RaggedArray(values, rnp.asarray(offsets).astype("int64"))


def from_lengths(values, lengths) -> RaggedArray:
    """Sequences of ``lengths[b]`` rows each, packed in ``values`` (``sum(lengths)`` rows;
    checked outside ``jit``)."""
    if not _traced(values, lengths):
        lengths = np.asarray(lengths)
        if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer) or np.any(lengths < 0):
            raise ValueError(f"ragged from_lengths: lengths must be a 1-d array of non-negative "
                             f"integers, got {lengths!r}")
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return from_offsets(values, offsets)
    lengths = rnp.asarray(lengths).astype("int64")
    return RaggedArray(values, rnp.concatenate([rnp.zeros(1, "int64"), rnp.cumsum(lengths)]))


def from_list(arrays: Sequence) -> RaggedArray:
    """Sequences given one by one (NumPy arrays of equal inner shapes; outside ``jit``)."""
    arrays = [np.asarray(a) for a in arrays]
    if not arrays:
        raise ValueError("ragged from_list: no sequences (give at least one, possibly empty)")
    inner = {a.shape[1:] for a in arrays}
    if len(inner) != 1 or any(a.ndim == 0 for a in arrays):
        raise ValueError(f"ragged from_list: sequences need one inner shape, got "
                         f"{[a.shape for a in arrays]}")
    return from_lengths(np.concatenate(arrays), [len(a) for a in arrays])


def from_padded(x, lengths) -> RaggedArray:
    """The first ``lengths[b]`` rows of ``x[b]`` (``x``: ``(batch, max_len, *inner)``), packed.
    Inside ``jit`` the packed length is a dim bound at run time (a boolean mask's)."""
    if not _traced(x, lengths):
        x, lengths = np.asarray(x), np.asarray(lengths)
        if lengths.shape != x.shape[:1] or np.any(lengths < 0) or np.any(lengths > x.shape[1]):
            raise ValueError(f"ragged from_padded: lengths {lengths.tolist()} for a padded array of "
                             f"shape {x.shape} (one per row, each at most {x.shape[1]})")
        return from_lengths(np.concatenate([x[b, :n] for b, n in enumerate(lengths)]) if len(lengths)
                            else x.reshape((0,) + x.shape[2:]), lengths)
    keep = rnp.arange(x.shape[1])[None, :] < rnp.asarray(lengths)[:, None]
    return from_lengths(x[keep], lengths)


def softmax(r: "RaggedArray | RaggedBlock", axis: int = -1) -> "RaggedArray | RaggedBlock":
    """Softmax over an inner axis (on the values) or over the ragged axis (``axis=1``: each
    sequence's rows, per inner position); of a :class:`RaggedBlock`, its ``softmax`` (``axis=2``:
    within each row of each sequence's block)."""
    if isinstance(r, RaggedBlock):
        return r.softmax(axis)
    a = r._inner_axis(axis, "softmax")
    if a < 0:
        raise NotImplementedError("ragged softmax over the batch axis (0): the sequences' positions do not "
                                  "line up; softmax over the ragged axis (1) or an inner one")
    if a:
        return r.with_values(nn.softmax(r.values, axis=a))
    ids = r.segment_ids()
    top = rnp.take(r.max(axis=1), ids, axis=0)
    e = rnp.exp(r.values - top)
    total = rnp.take(r.with_values(e).sum(axis=1), ids, axis=0)
    return r.with_values(e / total)


def dot_product_attention(query: RaggedArray, key: RaggedArray, value: RaggedArray, *, scale=None,
                          is_causal: bool = False, max_len=None) -> RaggedArray:
    """Attention within each sequence (varlen attention): ragged ``query``/``key``/``value``
    of inner shapes ``(N, H)``, ``(K, H)``, ``(K, Hv)`` (``K`` dividing ``N``),
    ``nn.dot_product_attention``'s semantics per sequence (``is_causal``: positions counted
    from each sequence's start).  ``key`` and ``value`` hold the same sequences; where they
    are not ``query``'s (other offsets, the same batch), each query sequence attends to its
    own key sequence: cross attention between two ragged batches (a decoder's queries over
    its encoder's outputs; causal as ``nn.dot_product_attention`` for lengths that differ).
    One library call on the packed values and the offsets
    (``nn.dot_product_attention_varlen``): nothing is padded and the scores are never formed;
    one compile serves every batch.  ``max_len`` is accepted for compatibility and ignored
    (the padded form needed it inside ``jit``)."""
    del max_len                            # no padding: the longest length is not needed
    if not all(isinstance(t, RaggedArray) for t in (query, key, value)):
        raise TypeError("ragged dot_product_attention: query, key and value must be ragged arrays "
                        "(make them with relaxjax.ragged.from_lengths / from_list)")
    # keys over the query's sequences (one offsets value, or equal ones outside jit), or others
    own = key.offsets is query.offsets or not _traced(key.offsets, query.offsets) and \
        np.array_equal(np.asarray(key.offsets), np.asarray(query.offsets))
    first = query if own else key
    key_values = _same_sequences(first, key) if own else key.values
    value_values = _same_sequences(first, value, None if own else "ragged dot_product_attention: key and value")
    if len(query.inner_shape) != 2 or len(key.inner_shape) != 2 or len(value.inner_shape) != 2:
        raise ValueError(f"ragged dot_product_attention: inner shapes (heads, head_dim) expected, got "
                         f"{query.inner_shape}, {key.inner_shape}, {value.inner_shape}")
    # the kernels take float32 and float64: float16 runs in float32 and comes back float16,
    # integers and bools in float64 (NumPy's exp would make them float64)
    dtype = np.dtype(rnp.result_type(query.values, key.values, value.values))
    work = dtype if dtype in (np.float32, np.float64) else np.dtype(np.float32 if dtype == np.float16 else np.float64)
    q, k, v = (t if np.dtype(rnp.result_type(t)) == work else rnp.asarray(t).astype(work)
               for t in (query.values, key_values, value_values))
    key_offsets = None if own else key.offsets
    out = nn.dot_product_attention_varlen(q, k, v, query.offsets, key_offsets=key_offsets, scale=scale,
                                          is_causal=is_causal)
    return query.with_values(out.astype(dtype) if dtype == np.float16 else out)
