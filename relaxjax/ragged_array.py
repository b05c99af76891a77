"""The ragged array type (``relaxjax.ragged`` documents it and adds the constructors, the
softmax over the ragged axis and varlen attention; ``relaxjax.ragged_block`` the per-sequence
blocks built on it).  It lives in a module of its own so that both import it and neither
imports the other's importer: ``ragged`` re-exports the blocks."""
from __future__ import annotations

import numpy as np
import optree

from . import lax
from . import numpy as rnp
from .core import Tracer, current_trace
from .ir import Var
from .lax import check_equal, match_cast
from .ragged_segments import has_kernel, segment_ids, segment_reduce
from .shapes import SymbolicDim, free_symbols

__all__ = ["RaggedArray"]


def note_ragged(values, offsets, kind: str) -> None:
    """Inside a trace, mark ``values`` as a ragged array's (``kind`` "array") or block's
    ("block") packed values over ``offsets``: the printed IR shows its ragged type."""
    if isinstance(values, Tracer) and isinstance(offsets, Tracer) and values.ctx is offsets.ctx \
            and values.ctx is current_trace() and isinstance(values.atom, Var):
        values.ctx.ragged[values.atom] = (offsets.atom, kind)


def _filled(dep, shape: tuple, fill, dtype):
    """``full(shape, fill, dtype)``, computed from ``dep`` (an int64 array of ``shape[0]``):
    an array sized by a run-time dim must not be made before the op that binds the dim, and
    the pipeline schedules an array made from nothing early (on the CUDA backend ahead of
    ``iota_count``); reading ``dep`` keeps it after.  ``dep`` None: a plain ``full``."""
    if dep is None or not isinstance(dep, Tracer):
        return rnp.full(shape, fill, dtype=dtype)
    zero = (dep * 0).astype(dtype).reshape((-1,) + (1,) * (len(shape) - 1))
    return rnp.broadcast_to(zero + rnp.asarray(fill, dtype=dtype), shape)


def _traced(*xs) -> bool:
    return any(isinstance(x, (Tracer, SymbolicDim)) for x in xs)


class PackedOperators:
    """What a ragged array and a ragged block share: the packed ``values`` and the sequence
    ``offsets``, their structure, and the operators (``relaxjax.numpy``'s elementwise
    functions, which hand them to the class's ``__relaxjax_ufunc__``)."""
    __slots__ = ()

    @property
    def batch(self):
        return self.offsets.shape[0] - 1

    @property
    def lengths(self):
        """Each sequence's length."""
        return self.offsets[1:] - self.offsets[:-1]

    @property
    def inner_shape(self) -> tuple:
        return tuple(self.values.shape[1:])

    @property
    def dtype(self):
        return self.values.dtype

    def _check_packing(self, values) -> None:
        """``values`` must pack as many rows (entries) as this one's, a ValueError otherwise
        (traced sizes are compared when the function runs)."""
        if values.shape[0] != self.values.shape[0] and not _traced(values.shape[0], self.values.shape[0]):
            what, unit, holder = self._PACKING
            raise ValueError(f"{what}: {values.shape[0]} packed {unit} for {holder} of "
                             f"{self.values.shape[0]} {unit} in all")

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
    def __ge__(self, o): return rnp.greater_equal(self, o)
    def __lt__(self, o): return rnp.less(self, o)
    def __le__(self, o): return rnp.less_equal(self, o)
    def __abs__(self): return rnp.abs(self)
    def __and__(self, o): return rnp.bitwise_and(self, o)
    def __or__(self, o): return rnp.bitwise_or(self, o)
    def __invert__(self): return rnp.invert(self)


class RaggedArray(PackedOperators):
    """``batch`` sequences of ``lengths[b]`` rows of shape ``inner``, packed (see ``relaxjax.ragged``)."""
    __slots__ = ("values", "offsets")
    _PACKING = ("ragged", "rows", "sequences")          # (for _check_packing's message)

    def __init__(self, values, offsets):
        self.values, self.offsets = values, offsets
        note_ragged(values, offsets, "array")

    # -- structure -------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return 1 + self.values.ndim

    def __repr__(self) -> str:
        inner = ", ".join(str(d) for d in self.inner_shape)
        return (f"RaggedArray(batch={self.batch}, lengths=ragged, inner=({inner}), "
                f"dtype={self.dtype}, total={self.values.shape[0]})")

    def with_values(self, values) -> "RaggedArray":
        """The same sequences (the same offsets) holding ``values``, packed alike."""
        self._check_packing(values)
        return RaggedArray(values, self.offsets)

    def segment_ids(self):
        """For each packed row, the index of the sequence it belongs to (total,)."""
        total = self.values.shape[0]
        if _traced(self.values, self.offsets):
            return segment_ids(self.offsets, total)
        return rnp.searchsorted(self.offsets[1:], rnp.arange(total), side="right")

    # -- elementwise -----------------------------------------------------------------------
    @classmethod
    def __relaxjax_ufunc__(cls, fn, args):
        """``relaxjax.numpy``'s elementwise ``fn`` on ragged (and dense) ``args``: on the
        packed values, dense operands broadcast over the inner dims."""
        for a in args:
            # a ragged block among the operands applies the function itself (and says why a
            # ragged array's rows do not line up with its entries)
            if not isinstance(a, RaggedArray) and hasattr(type(a), "__relaxjax_ufunc__"):
                return type(a).__relaxjax_ufunc__(fn, args)
        ragged = [a for a in args if isinstance(a, RaggedArray)]
        first = ragged[0]
        vals = []
        for a in args:
            if isinstance(a, RaggedArray):
                vals.append(a.values if a is first else _same_sequences(first, a))
                continue
            nd = np.ndim(a) if not isinstance(a, Tracer) else a.ndim
            if nd > len(first.inner_shape):
                raise ValueError(f"ragged: a dense operand of rank {nd} does not broadcast over "
                                 f"the inner dims {first.inner_shape} of a ragged array (a "
                                 f"per-sequence value: index it with r.segment_ids())")
            vals.append(a)
        return first.with_values(fn(*vals))

    def astype(self, dtype) -> "RaggedArray":
        return self.with_values(rnp.asarray(self.values).astype(dtype))

    def __matmul__(self, w):
        """A projection of every row: one matrix product over the packed values."""
        if isinstance(w, RaggedArray):
            # per sequence (len, d) @ (len, d) is no matrix product: the scores q_b @ k_b.T
            # are spelled out, and a block then multiplies a ragged array (block @ v)
            raise NotImplementedError("ragged @ ragged: per sequence that is (len, d) @ (len, d); for "
                                      "q_b @ k_b.T (a ragged block of scores) use ragged.matmul_t(q, k), "
                                      "then block @ v")
        if hasattr(type(w), "__relaxjax_ufunc__"):
            raise NotImplementedError(f"ragged @ {type(w).__name__}: r_b @ s_b per sequence is not built; "
                                      f"s.T @ r gives each sequence's s_b.T @ r_b")
        return self.with_values(rnp.matmul(self.values, w))

    # -- reductions ------------------------------------------------------------------------
    def _inner_axis(self, axis: int, what: str) -> int:
        """An axis of the ragged array's (batch, ragged, *inner) as an axis of ``values``."""
        n = self.ndim
        a = axis + n if axis < 0 else axis
        if not 0 <= a < n:
            raise np.exceptions.AxisError(f"ragged {what}: axis {axis} is out of bounds for a ragged "
                                          f"array of {n} dims (batch, ragged, *inner)")
        return a - 1          # the batch axis: -1

    def _positions(self) -> tuple:
        """Each packed row's position in its sequence (total,), and the positions 0 up to
        the longest length (longest,); inside ``jit`` the longest length is a run-time dim,
        bound here once for every reduction that uses it."""
        pos = rnp.arange(self.values.shape[0]) - rnp.take(self.offsets, self.segment_ids(), axis=0)
        longest = rnp.max(rnp.concatenate([rnp.zeros(1, "int64"), self.lengths.astype("int64")]))
        if _traced(self.values, self.offsets):
            return pos, lax.iota_count(longest)
        return pos, np.arange(int(longest), dtype=np.int64)

    def _by_position(self, mode: str, init, positions: tuple):
        """Per position (``_positions``), the rows there combined by ``mode`` (add / max /
        min) over the sequences that reach it: (longest, *inner), and how many do."""
        pos, at = positions
        acc = _filled(at, (at.shape[0],) + self.inner_shape, init, self.dtype)
        combined = lax.scatter.bind(acc, pos, rnp.asarray(self.values), axis=0, mode=mode, oob="drop")
        count = lax.scatter.bind(_filled(at, (at.shape[0],), 0, "int64"), pos, rnp.ones(pos.shape, "int64"),
                                 axis=0, mode="add", oob="drop")
        return combined, count

    def _over_batch(self, what: str, keepdims: bool):
        """The batch axis reduced as NumPy's masked arrays reduce the padded form with the
        padding masked: position p over the sequences longer than p; (longest, *inner)."""
        count_shape = (-1,) + (1,) * len(self.inner_shape)
        positions = self._positions()
        if what in ("sum", "max", "min"):
            mode = {"sum": "add"}.get(what, what)
            out = self._by_position(mode, self._identity(mode), positions)[0]
        else:
            total, count = self._by_position("add", 0, positions)
            mean = total / count.reshape(count_shape)
            out = mean
            if what == "var":                         # the deviations from each position's mean
                dev = self.values - rnp.take(mean, positions[0], axis=0)
                out = self.with_values(dev * dev)._by_position("add", 0, positions)[0] / count.reshape(count_shape)
        return rnp.expand_dims(out, 0) if keepdims else out

    def _segment(self, mode: str, init):
        """Per sequence, the rows combined by ``mode`` (add / max / min): (batch, *inner).
        Inside ``jit`` on loops whose extent is read from the offsets (``ragged_segments``);
        else (and for dtypes it has no kernel for) a scatter into the sequences."""
        if _traced(self.values, self.offsets) and has_kernel(self.dtype):
            return segment_reduce(mode, self.values, self.offsets, init)
        shape = (self.batch,) + self.inner_shape
        acc = rnp.full(shape, init, dtype=self.dtype)
        return lax.scatter.bind(acc, self.segment_ids(), self.values, axis=0, mode=mode, oob="drop")

    def _per_sequence(self, out, keepdims: bool):
        """A reduction over the ragged axis, (batch, *inner), with that axis kept as 1."""
        return rnp.expand_dims(out, 1) if keepdims else out

    def _elsewhere(self, what: str, dense, axis, keepdims: bool):
        """``what`` (NumPy's ``dense``) over all values (``axis=None``), an inner axis (a
        ragged array again) or the batch axis; None over the ragged axis (the caller's)."""
        if axis is None:
            return dense(self.values)
        a = self._inner_axis(axis, what)
        if a < 0:
            return self._over_batch(what, keepdims)
        return self.with_values(dense(self.values, axis=a, keepdims=keepdims)) if a else None

    def _identity(self, mode: str):
        """The identity of ``mode`` (add / max / min) in this dtype: an empty sequence's result
        (-inf for max and inf for min, or the integer type's bounds; NumPy raises for the
        extremum of an empty sequence)."""
        if mode == "add":
            return 0
        floating = np.issubdtype(self.dtype, np.floating)
        if mode == "max":
            return -np.inf if floating else np.iinfo(self.dtype).min
        return np.inf if floating else np.iinfo(self.dtype).max

    def sum(self, axis=None, keepdims: bool = False):
        out = self._elsewhere("sum", rnp.sum, axis, keepdims)
        return out if out is not None else self._per_sequence(self._segment("add", 0), keepdims)

    def mean(self, axis=None, keepdims: bool = False):
        out = self._elsewhere("mean", rnp.mean, axis, keepdims)
        return out if out is not None else \
            self._per_sequence(self._segment("add", 0) / self._counts(), keepdims)

    def _counts(self):
        """Each sequence's length, shaped to divide a (batch, *inner) reduction (an empty
        sequence: 0, so its mean and var are nan, as NumPy's of an empty array)."""
        return self.lengths.reshape((-1,) + (1,) * len(self.inner_shape))

    def var(self, axis=None, keepdims: bool = False):
        """Over all values, an inner axis, or each sequence (axis 1: two passes, the
        deviations from each sequence's mean, as NumPy computes it)."""
        out = self._elsewhere("var", rnp.var, axis, keepdims)
        if out is not None:
            return out
        dev = self.values - self.mean(axis=1)[self.segment_ids()]
        return self._per_sequence(self.with_values(dev * dev)._segment("add", 0) / self._counts(), keepdims)

    def _extremum(self, mode: str, axis, keepdims: bool):
        out = self._elsewhere(mode, rnp.max if mode == "max" else rnp.min, axis, keepdims)
        return out if out is not None else self._per_sequence(self._segment(mode, self._identity(mode)), keepdims)

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


def _same_sequences(a: RaggedArray, b: RaggedArray, what: str | None = None):
    """Two ragged operands of one op hold the same sequences (:func:`_same_offsets`).
    Returns ``b``'s values with ``a``'s packed rows (:func:`_rows_like`)."""
    _same_offsets(a, b, what)
    return _rows_like(a, b, f"{what or 'ragged operands'}: packed rows")


def _same_offsets(a, b, what: str | None = None) -> None:
    """``a`` and ``b`` (ragged arrays or blocks) hold the same sequences: equal offsets.
    Inside ``jit`` the batch must agree (proved, or guarded as any shape is), the offsets
    are compared when the function runs (``check_equal``, unless they are one value), and
    the first operand's are used for both.  ``what`` names the operands in the errors."""
    if a.offsets is b.offsets:
        return
    if _traced(a.offsets, b.offsets):
        env = current_trace().env
        env.require_eq(_dim0(a.offsets), _dim0(b.offsets), f"{what or 'ragged operands'}: batch sizes")
        check_equal.bind(a.offsets, b.offsets,
                         what=f"{what}: their offsets" if what else "ragged: the offsets of two operands")
    elif not np.array_equal(np.asarray(a.offsets), np.asarray(b.offsets)):
        la, lb = np.diff(np.asarray(a.offsets)).tolist(), np.diff(np.asarray(b.offsets)).tolist()
        raise ValueError(f"{what} hold different sequences (lengths {la} and {lb})" if what else
                         f"ragged: elementwise operands have different lengths ({la} and {lb})")


def _rows_like(a, b, what: str):
    """``b.values`` with ``a.values``' first dim (the offsets already found equal): where
    either is a dim only the run knows (a ragged block's entries, or its reduction's rows)
    asserted by ``match_cast``, else required equal (``what`` names them)."""
    vb = b.values
    if not isinstance(vb, Tracer) or not _traced(a.values):
        return vb
    da, db = _dim0(a.values), _dim0(vb)
    if da == db:
        return vb
    env = current_trace().env
    if (free_symbols(da) | free_symbols(db)) & env.data_dependent:
        # two run-time dims are unrelated to the trace: equal offsets make them equal
        return match_cast.bind(vb, shape=(env.canon(da),) + tuple(vb.type.shape[1:]))
    env.require_eq(da, db, what)
    return vb


def _dim0(x):
    """The first dim of ``x`` as the shape env takes it (an int or a symbolic expression)."""
    return x.type.shape[0] if isinstance(x, Tracer) else np.shape(x)[0]
