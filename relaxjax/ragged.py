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
  ``axis=1``, ``keepdims`` too) and
  :func:`softmax` over it: segment reductions, each token's sequence found once from the
  offsets (:meth:`RaggedArray.segment_ids`).

``to_padded`` gathers into ``(batch, max_len, *inner)``; ``from_padded`` packs back.

:func:`dot_product_attention` is attention within each sequence on the packed values and
the offsets, unpadded (varlen attention: one library call, ``nn.attention_varlen*``, whose
kernels find each work item's sequence from the offsets; no ``max_len`` needed).

Not yet here (issue 20's later steps): per-sequence products that make a ragged x ragged
block as a value, loops whose extent depends on an outer index in the loop-level IR, and the
ragged type shown in the IR.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import optree

from . import nn
from . import numpy as rnp
from .core import Tracer, current_trace
from .lax import check_equal
from .shapes import SymbolicDim

__all__ = ["RaggedArray", "from_lengths", "from_offsets", "from_list", "from_padded", "softmax",
           "dot_product_attention"]


def _traced(*xs) -> bool:
    return any(isinstance(x, (Tracer, SymbolicDim)) for x in xs)


class RaggedArray:
    """``batch`` sequences of ``lengths[b]`` rows of shape ``inner``, packed (see the module)."""
    __slots__ = ("values", "offsets")

    def __init__(self, values, offsets):
        self.values, self.offsets = values, offsets

    # -- structure -------------------------------------------------------------------------
    @property
    def batch(self):
        return self.offsets.shape[0] - 1

    @property
    def lengths(self):
        return self.offsets[1:] - self.offsets[:-1]

    @property
    def inner_shape(self) -> tuple:
        return tuple(self.values.shape[1:])

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def ndim(self) -> int:
        return 1 + self.values.ndim

    def __repr__(self) -> str:
        inner = ", ".join(str(d) for d in self.inner_shape)
        return (f"RaggedArray(batch={self.batch}, lengths=ragged, inner=({inner}), "
                f"dtype={self.dtype}, total={self.values.shape[0]})")

    def with_values(self, values) -> "RaggedArray":
        """The same sequences (the same offsets) holding ``values``, packed alike."""
        if values.shape[0] != self.values.shape[0] and not _traced(values.shape[0], self.values.shape[0]):
            raise ValueError(f"ragged: {values.shape[0]} packed rows for sequences of "
                             f"{self.values.shape[0]} rows in all")
        return RaggedArray(values, self.offsets)

    def segment_ids(self):
        """For each packed row, the index of the sequence it belongs to (total,)."""
        total = self.values.shape[0]
        return rnp.searchsorted(self.offsets[1:], rnp.arange(total), side="right")

    # -- elementwise -----------------------------------------------------------------------
    @classmethod
    def __relaxjax_ufunc__(cls, fn, args):
        """``relaxjax.numpy``'s elementwise ``fn`` on ragged (and dense) ``args``: on the
        packed values, dense operands broadcast over the inner dims."""
        ragged = [a for a in args if isinstance(a, RaggedArray)]
        first = ragged[0]
        for other in ragged[1:]:
            _same_sequences(first, other)
        vals = []
        for a in args:
            if isinstance(a, RaggedArray):
                vals.append(a.values)
                continue
            nd = np.ndim(a) if not isinstance(a, Tracer) else a.ndim
            if nd > len(first.inner_shape):
                raise ValueError(f"ragged: a dense operand of rank {nd} does not broadcast over "
                                 f"the inner dims {first.inner_shape} of a ragged array (a "
                                 f"per-sequence value: index it with r.segment_ids())")
            vals.append(a)
        return first.with_values(fn(*vals))

    def __add__(self, o): return rnp.add(self, o)
    def __radd__(self, o): return rnp.add(o, self)
    def __sub__(self, o): return rnp.subtract(self, o)
    def __rsub__(self, o): return rnp.subtract(o, self)
    def __mul__(self, o): return rnp.multiply(self, o)
    def __rmul__(self, o): return rnp.multiply(o, self)
    def __truediv__(self, o): return rnp.true_divide(self, o)
    def __rtruediv__(self, o): return rnp.true_divide(o, self)
    def __pow__(self, o): return rnp.power(self, o)
    def __neg__(self): return rnp.negative(self)
    def __gt__(self, o): return rnp.greater(self, o)
    def __lt__(self, o): return rnp.less(self, o)

    def astype(self, dtype) -> "RaggedArray":
        return self.with_values(rnp.asarray(self.values).astype(dtype))

    def __matmul__(self, w):
        """A projection of every row: one matrix product over the packed values."""
        if isinstance(w, RaggedArray):
            raise NotImplementedError("ragged @ ragged (a per-sequence block, attention scores) is "
                                      "not built yet; pad with to_padded() for now")
        return self.with_values(rnp.matmul(self.values, w))

    # -- reductions ------------------------------------------------------------------------
    def _inner_axis(self, axis: int, what: str) -> int:
        """An axis of the ragged array's (batch, ragged, *inner) as an axis of ``values``."""
        n = self.ndim
        a = axis + n if axis < 0 else axis
        if not 0 <= a < n:
            raise np.exceptions.AxisError(f"ragged {what}: axis {axis} is out of bounds for a ragged "
                                          f"array of {n} dims (batch, ragged, *inner)")
        if a == 0:
            raise NotImplementedError(f"ragged {what} over the batch axis (0): reduce over the "
                                      f"ragged axis (1) first")
        return a - 1

    def _segment(self, mode: str, init):
        """Per sequence, the rows combined by ``mode`` (add / max / min): (batch, *inner)."""
        shape = (self.batch,) + self.inner_shape
        acc = rnp.full(shape, init, dtype=self.dtype)
        at = acc.at[self.segment_ids()]
        return {"add": at.add, "max": at.max, "min": at.min}[mode](self.values)

    def _per_sequence(self, out, keepdims: bool):
        """A reduction over the ragged axis, (batch, *inner), with that axis kept as 1."""
        return rnp.expand_dims(out, 1) if keepdims else out

    def sum(self, axis=None, keepdims: bool = False):
        if axis is None:
            return rnp.sum(self.values)
        a = self._inner_axis(axis, "sum")
        return self._per_sequence(self._segment("add", 0), keepdims) if a == 0 else \
            self.with_values(rnp.sum(self.values, axis=a, keepdims=keepdims))

    def mean(self, axis=None, keepdims: bool = False):
        if axis is None:
            return rnp.mean(self.values)
        a = self._inner_axis(axis, "mean")
        if a:
            return self.with_values(rnp.mean(self.values, axis=a, keepdims=keepdims))
        return self._per_sequence(self._segment("add", 0) / self._counts(), keepdims)

    def _counts(self):
        """Each sequence's length, shaped to divide a (batch, *inner) reduction (an empty
        sequence: 0, so its mean and var are nan, as NumPy's of an empty array)."""
        return self.lengths.reshape((-1,) + (1,) * len(self.inner_shape))

    def var(self, axis=None, keepdims: bool = False):
        """Over all values, an inner axis, or each sequence (axis 1: two passes, the
        deviations from each sequence's mean, as NumPy computes it)."""
        if axis is None:
            return rnp.var(self.values)
        a = self._inner_axis(axis, "var")
        if a:
            return self.with_values(rnp.var(self.values, axis=a, keepdims=keepdims))
        dev = self.values - self.mean(axis=1)[self.segment_ids()]
        return self._per_sequence(self.with_values(dev * dev)._segment("add", 0) / self._counts(), keepdims)

    def _extremum(self, mode: str, axis, keepdims: bool):
        if axis is None:
            return (rnp.max if mode == "max" else rnp.min)(self.values)
        a = self._inner_axis(axis, mode)
        if a:
            return self.with_values((rnp.max if mode == "max" else rnp.min)(self.values, axis=a, keepdims=keepdims))
        # an empty sequence: the identity, -inf for max and inf for min (or the integer
        # type's bound; NumPy raises for the extremum of an empty sequence)
        floating = np.issubdtype(self.dtype, np.floating)
        if mode == "max":
            init = -np.inf if floating else np.iinfo(self.dtype).min
        else:
            init = np.inf if floating else np.iinfo(self.dtype).max
        return self._per_sequence(self._segment(mode, init), keepdims)

    def max(self, axis=None, keepdims: bool = False):
        return self._extremum("max", axis, keepdims)

    def min(self, axis=None, keepdims: bool = False):
        return self._extremum("min", axis, keepdims)

    # -- conversions -----------------------------------------------------------------------
    def to_padded(self, fill=0, max_len=None):
        """``(batch, max_len, *inner)``: sequence b in row b, ``fill`` past its length.
        ``max_len`` (an int or a dim) is needed inside ``jit``, where the longest length is
        a value, not a shape; outside it defaults to the longest."""
        if max_len is None:
            if _traced(self.values, self.offsets):
                raise ValueError("ragged to_padded inside jit needs max_len= (an int or a dim): the "
                                 "longest length is a value of the offsets, not a shape")
            lengths = np.asarray(self.lengths)
            max_len = int(lengths.max()) if lengths.size else 0
        total = self.values.shape[0]
        t = rnp.arange(max_len)
        idx = self.offsets[:-1, None] + t[None, :]                                # (batch, max_len)
        valid = t[None, :] < self.lengths[:, None]
        # an invalid position reads the extra row after the values (so an empty array works)
        padded_values = rnp.concatenate([self.values, rnp.zeros((1,) + self.inner_shape, self.dtype)])
        rows = rnp.take(padded_values, rnp.where(valid, idx, total), axis=0)
        mask = valid.reshape(valid.shape + (1,) * len(self.inner_shape))
        return rnp.where(mask, rows, rnp.asarray(fill, dtype=self.dtype))

    def to_list(self) -> list:
        """The sequences as a list of NumPy arrays (outside ``jit``)."""
        values, offsets = np.asarray(self.values), np.asarray(self.offsets)
        return [values[offsets[b]:offsets[b + 1]] for b in range(len(offsets) - 1)]


optree.register_pytree_node(RaggedArray, lambda r: ((r.values, r.offsets), None, ("values", "offsets")),
                            lambda _, children: RaggedArray(*children),
                            namespace=getattr(optree.registry, "__GLOBAL_NAMESPACE"))


def _same_sequences(a: RaggedArray, b: RaggedArray) -> None:
    """Two ragged operands of one op hold the same sequences: equal offsets.  Inside ``jit``
    the batch and the packed rows must agree (proved, or guarded as any shape is), the
    offsets are compared when the function runs (``check_equal``, unless they are one
    value), and the first operand's are used for both."""
    if a.offsets is b.offsets:
        return
    if _traced(a.offsets, b.offsets):
        env = current_trace().env
        env.require_eq(_dim0(a.offsets), _dim0(b.offsets), "ragged operands: batch sizes")
        env.require_eq(_dim0(a.values), _dim0(b.values), "ragged operands: packed rows")
        check_equal.bind(a.offsets, b.offsets, what="ragged: the offsets of two operands")
        return
    if not np.array_equal(np.asarray(a.offsets), np.asarray(b.offsets)):
        raise ValueError(f"ragged: elementwise operands have different lengths "
                         f"({np.diff(np.asarray(a.offsets)).tolist()} and {np.diff(np.asarray(b.offsets)).tolist()})")


def _dim0(x):
    """The first dim of ``x`` as the shape env takes it (an int or a symbolic expression)."""
    return x.type.shape[0] if isinstance(x, Tracer) else np.shape(x)[0]


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


def softmax(r: RaggedArray, axis: int = -1) -> RaggedArray:
    """Softmax over an inner axis (on the values) or over the ragged axis (``axis=1``: each
    sequence's rows, per inner position)."""
    a = r._inner_axis(axis, "softmax")
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
    of inner shapes ``(N, H)``, ``(K, H)``, ``(K, Hv)`` over the same sequences (``K``
    dividing ``N``), ``nn.dot_product_attention``'s semantics per sequence (``is_causal``:
    positions counted from each sequence's start).  One library call on the packed values
    and the offsets (``nn.dot_product_attention_varlen``): nothing is padded and the scores
    are never formed; one compile serves every batch.  ``max_len`` is accepted for
    compatibility and ignored (the padded form needed it inside ``jit``)."""
    del max_len                            # no padding: the longest length is not needed
    if not all(isinstance(t, RaggedArray) for t in (query, key, value)):
        raise TypeError("ragged dot_product_attention: query, key and value must be ragged arrays "
                        "(make them with relaxjax.ragged.from_lengths / from_list)")
    _same_sequences(query, key)
    _same_sequences(query, value)
    if len(query.inner_shape) != 2 or len(key.inner_shape) != 2 or len(value.inner_shape) != 2:
        raise ValueError(f"ragged dot_product_attention: inner shapes (heads, head_dim) expected, got "
                         f"{query.inner_shape}, {key.inner_shape}, {value.inner_shape}")
    # the kernels take float32 and float64: float16 runs in float32 and comes back float16,
    # integers and bools in float64 (NumPy's exp would make them float64)
    dtype = np.dtype(rnp.result_type(query.values, key.values, value.values))
    work = dtype if dtype in (np.float32, np.float64) else np.dtype(np.float32 if dtype == np.float16 else np.float64)
    q, k, v = (t.values if np.dtype(rnp.result_type(t.values)) == work else rnp.asarray(t.values).astype(work)
               for t in (query, key, value))
    out = nn.dot_product_attention_varlen(q, k, v, query.offsets, scale=scale, is_causal=is_causal)
    return query.with_values(out.astype(dtype) if dtype == np.float16 else out)
