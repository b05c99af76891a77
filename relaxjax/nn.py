"""Neural-network functions as composites of relaxjax.numpy (as in ``jax.nn``)."""
from __future__ import annotations

import math

import numpy as np

from . import numpy as rnp
from . import lax
from .frontend import call_library
from .library import attention_lengths_name, attention_name, attention_varlen_name
from .numpy._base import arr, cast, dtype_of, env, shape
from .shapes import prod, wrap_dim
from .structs import ShapeDtypeStruct


def relu(x):
    """max(x, 0)."""
    return rnp.maximum(x, 0)


def sigmoid(x):
    """1 / (1 + exp(-x))."""
    return 1.0 / (1.0 + rnp.exp(rnp.negative(x)))


def silu(x):
    """x * sigmoid(x) (also called swish)."""
    return x * sigmoid(x)


swish = silu


def gelu(x, approximate: bool = True):
    """GELU; ``approximate=True`` is the tanh form (the default of ``jax.nn.gelu``)."""
    x = arr(x)
    if approximate:
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + rnp.tanh(c * (x + 0.044715 * (x * x * x))))
    return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


def erf(x):
    """The error function (float inputs)."""
    x = arr(x)
    if not rnp._base.dt.is_float(dtype_of(x)):
        x = cast(x, "float64")
    return lax.erf.bind(x)


def softmax(x, axis=-1):
    """exp(x - max) / sum(exp(x - max)) along ``axis``."""
    m = rnp.max(x, axis=axis, keepdims=True)
    e = rnp.exp(x - m)
    return e / rnp.sum(e, axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    """x - logsumexp(x) along ``axis``."""
    m = rnp.max(x, axis=axis, keepdims=True)
    shifted = x - m
    return shifted - rnp.log(rnp.sum(rnp.exp(shifted), axis=axis, keepdims=True))


def logsumexp(a, axis=None, keepdims: bool = False):
    """log(sum(exp(a))) computed stably (a non-finite max is treated as 0, as in SciPy)."""
    a = arr(a)
    m = rnp.max(a, axis=axis, keepdims=True)
    m = rnp.where(rnp.isfinite(m), m, cast(0, dtype_of(m)))
    s = rnp.sum(rnp.exp(a - m), axis=axis, keepdims=True)
    out = rnp.log(s) + m
    if not keepdims:
        axes = range(rnp.ndim(a)) if axis is None else axis
        out = rnp.squeeze(out, axis=tuple(axes) if not isinstance(axes, int) else axes)
    return out


def layer_norm(x, gamma=None, beta=None, axis=-1, eps: float = 1e-5):
    """(x - mean) / sqrt(var + eps) * gamma + beta over ``axis``."""
    mean = rnp.mean(x, axis=axis, keepdims=True)
    var = rnp.var(x, axis=axis, keepdims=True)
    y = (x - mean) / rnp.sqrt(var + eps)
    if gamma is not None:
        y = y * gamma
    if beta is not None:
        y = y + beta
    return y


def rms_norm(x, gamma=None, axis=-1, eps: float = 1e-6):
    """x / sqrt(mean(x**2) + eps) * gamma over ``axis``."""
    ms = rnp.mean(x * x, axis=axis, keepdims=True)
    y = x / rnp.sqrt(ms + eps)
    if gamma is not None:
        y = y * gamma
    return y


def one_hot(x, num_classes, dtype="float64"):
    """one_hot(x)[..., c] = (x == c)."""
    classes = rnp.arange(num_classes)
    return rnp.astype(rnp.expand_dims(x, -1) == classes, dtype)


def dot_product_attention(query, key, value, bias=None, mask=None, *, scale=None,
                          is_causal: bool = False, query_seq_lengths=None, key_value_seq_lengths=None):
    """``jax.nn.dot_product_attention``: ``softmax(q k^T * scale + bias, masked) v`` per head.

    Layout as JAX's: ``query`` ``(..., T, N, H)`` (sequence, heads, head size, under any
    leading batch dims; rank 3 is ``(T, N, H)``), ``key``/``value`` ``(..., S, K, H)``
    with ``K`` dividing ``N`` (grouped-query attention: query head ``n`` reads key/value
    head ``n // (N // K)``); ``T`` and ``S`` may be different symbolic dims.  ``bias`` is
    added to the logits and ``mask`` (True: attend) selects them, both broadcast to
    ``(..., N, T, S)``; ``is_causal`` keeps key ``j <= i`` for query ``i``; ``scale``
    defaults to ``1 / sqrt(H)``.  A fully masked row gets uniform weights (JAX's large
    negative logit, not -inf).  Returns ``(..., T, N, H)``.

    ``key_value_seq_lengths`` (B,) (rank-4 inputs): batch b attends to its first
    ``key_value_seq_lengths[b]`` keys, as a decode step over a preallocated cache does
    (a length of 0 gives zeros); ``query_seq_lengths`` (B,): output rows from
    ``query_seq_lengths[b]`` on are zeros.

    Without ``bias`` and ``mask``, on float32 or float64, it is one library call
    (``library.attention_name``, ``attention_lengths_name`` with key lengths) that never
    forms the ``T x S`` scores: on the CPU a blocked kernel with an online softmax
    (``backends/llvm/attention.py``), stopping at each batch's key length; its gradient
    recomputes the scores (``attention_scores``).  Otherwise the scores are formed in full,
    except where ``mask`` is causal or keeps each batch row's first keys (``arange(S) <
    lengths``), which the compiler's ``AttentionCalls`` makes the causal or key-lengths
    call."""
    q, k, v = arr(query), arr(key), arr(value)
    if q.ndim < 3 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise ValueError(f"dot_product_attention: query, key and value need the same rank >= 3 "
                         f"((..., seq, heads, head_dim)); got ranks {q.ndim}, {k.ndim}, {v.ndim}")
    kv_len = None if key_value_seq_lengths is None else \
        _seq_lengths(key_value_seq_lengths, q, "key_value_seq_lengths")
    q_len = None if query_seq_lengths is None else _seq_lengths(query_seq_lengths, q, "query_seq_lengths")
    n_heads, kv_heads = int(q.shape[-2]), int(k.shape[-2])
    if int(v.shape[-2]) != kv_heads or n_heads % kv_heads:
        raise ValueError(f"dot_product_attention: {n_heads} query heads need a key/value head count "
                         f"dividing it (key has {kv_heads}, value {int(v.shape[-2])})")
    if scale is None:
        scale = 1.0 / math.sqrt(int(q.shape[-1]))
    dtype = np.dtype(rnp.result_type(q, k, v))
    lengths = kv_len is not None or q_len is not None
    if bias is None and mask is None and dtype in (np.float32, np.float64) \
            and isinstance(scale, (int, float, np.number)) and not (is_causal and lengths):
        q, k, v = (cast(t, dtype) for t in (q, k, v))
        _same_layout(q, k, v)
        if not lengths:
            return _attention_kernel(q, k, v, float(scale), bool(is_causal))
        if kv_len is None:                 # every key
            kv_len = rnp.full(wrap_dim(shape(q)[0]), wrap_dim(shape(k)[1]), dtype="int32")
        extra = [kv_len] if q_len is None else [kv_len, q_len]
        return call_library(attention_lengths_name(dtype, q_len is not None), q, k, v,
                            rnp.asarray(scale, dtype=dtype), *extra,
                            out=ShapeDtypeStruct(tuple(wrap_dim(d) for d in shape(q)[:-1] + (shape(v)[-1],)), dtype))
    if q_len is not None:                  # the scores' path, its rows past the lengths zeroed
        out = dot_product_attention(q, k, v, bias, mask, scale=scale, is_causal=is_causal,
                                    key_value_seq_lengths=kv_len)
        keep = rnp.arange(wrap_dim(shape(q)[1]))[None, :] < q_len[:, None]     # (B, T)
        return rnp.where(keep[:, :, None, None], out, rnp.zeros((), dtype_of(out)))
    if kv_len is None:
        return attention_scores(q, k, v, bias, mask, scale, is_causal)
    keys = key_length_mask(kv_len, k)
    out = attention_scores(q, k, v, bias, keys if mask is None else rnp.logical_and(mask, keys),
                           scale, is_causal)
    # no keys: zeros, as the library call gives (not a masked row's uniform weights)
    return rnp.where((kv_len > 0)[:, None, None, None], out, rnp.zeros((), dtype_of(out)))



def dot_product_attention_varlen(query, key, value, offsets, *, key_offsets=None, scale=None,
                                 is_causal: bool = False):
    """Attention within each of ``B`` sequences packed one after the other along axis 0,
    without padding (FlashAttention's varlen form, one ``cu_seqlens`` for queries and keys;
    ``relaxjax.ragged``'s layout): ``query`` ``(T, N, H)``, ``key`` ``(T, K, H)``, ``value``
    ``(T, K, Hv)`` with ``K`` dividing ``N`` (grouped-query heads), sequence ``b`` being rows
    ``offsets[b]:offsets[b + 1]`` of each (``offsets``: ``B + 1`` integers from 0 to ``T``,
    non-decreasing; an empty sequence has no rows).  ``is_causal``: key ``j <= i`` for query
    ``i``, both counted from the sequence's start; ``scale`` (a number or a 0-d array)
    defaults to ``1 / sqrt(H)``.  Returns ``(T, N, Hv)``.

    ``key_offsets`` (``B + 1`` integers from 0 to ``Tk``): cross attention between two packed
    batches (FlashAttention's ``cu_seqlens_k``): ``key`` ``(Tk, K, H)`` and ``value`` ``(Tk, K,
    Hv)`` hold sequences of their own, query sequence ``b`` attending to key rows
    ``key_offsets[b]:key_offsets[b + 1]`` (a decoder's queries to its encoder's outputs);
    ``is_causal`` then keeps key ``j <= i`` as ``dot_product_attention`` does for a query
    and a key length that differ.

    One library call (``library.attention_varlen_name``): on the CPU the blocked kernel of
    ``nn.attention_*`` with its work items (sequence, query block, head) found from the
    offsets, on a GPU the flash kernel likewise; the scores are never formed.  Bad offsets
    raise ``ValueError`` when the call runs.  Its gradient forms the scores of the whole
    packed batch, masked to each sequence's block (``ad.LIBRARY_VJPS``): ``T x T`` per head."""
    q, k, v = arr(query), arr(key), arr(value)
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise ValueError(f"dot_product_attention_varlen: query, key and value must be packed as (rows, heads, "
                         f"head_dim); got ranks {q.ndim}, {k.ndim}, {v.ndim}")
    offsets = _offsets_arg(offsets, "offsets")
    if key_offsets is not None:
        key_offsets = _offsets_arg(key_offsets, "key_offsets")
    n_heads, kv_heads = int(q.shape[-2]), int(k.shape[-2])
    if int(v.shape[-2]) != kv_heads or (kv_heads == 0 and n_heads) or (kv_heads and n_heads % kv_heads):
        raise ValueError(f"dot_product_attention_varlen: {n_heads} query heads need a key/value head count "
                         f"dividing it (key has {kv_heads}, value {int(v.shape[-2])})")
    dtype = np.dtype(rnp.result_type(q, k, v))
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"dot_product_attention_varlen: float32 or float64 inputs (the kernels' dtypes), "
                        f"got {dtype}; convert them with .astype")
    if scale is None:
        scale = 1.0 / math.sqrt(int(q.shape[-1]))
    scale = cast(arr(scale), dtype)
    if rnp.ndim(scale) != 0:
        raise ValueError(f"dot_product_attention_varlen: scale must be a number or a 0-d array, got "
                         f"shape {tuple(shape(scale))}")
    q, k, v = (cast(t, dtype) for t in (q, k, v))
    e = env()
    if key_offsets is None:
        e.require_eq(shape(q)[0], shape(k)[0], "dot_product_attention_varlen: packed rows (axis 0) of query and key")
        e.require_eq(shape(q)[0], shape(v)[0], "dot_product_attention_varlen: packed rows (axis 0) of query and value")
    else:
        e.require_eq(shape(k)[0], shape(v)[0], "dot_product_attention_varlen: packed rows (axis 0) of key and value")
        e.require_eq(shape(offsets)[0], shape(key_offsets)[0],
                     "dot_product_attention_varlen: entries (batch + 1) of offsets and key_offsets")
    e.require_eq(shape(q)[2], shape(k)[2], "dot_product_attention_varlen: head size (axis 2) of query and key")
    out = ShapeDtypeStruct((wrap_dim(shape(q)[0]), wrap_dim(shape(q)[1]), wrap_dim(shape(v)[2])), dtype)
    extra = () if key_offsets is None else (cast(key_offsets, np.dtype("int64")),)
    return call_library(attention_varlen_name(dtype, bool(is_causal), key_offsets is not None), q, k, v, scale,
                        cast(offsets, np.dtype("int64")), *extra, out=out)


def _offsets_arg(offsets, name: str):
    o = arr(offsets)
    if o.ndim != 1 or not np.issubdtype(dtype_of(o), np.integer):
        raise ValueError(f"dot_product_attention_varlen: {name} must be a 1-d integer array (batch + 1 "
                         f"entries), got rank {o.ndim} and dtype {dtype_of(o)}")
    return o

def key_length_mask(lengths, key):
    """Key lengths (B,) as a mask of the scores (B, N, T, S): key j of batch b is kept
    where ``j < lengths[b]``."""
    keys = rnp.arange(wrap_dim(shape(key)[1]))[None, :] < lengths[:, None]  # (B, S)
    return keys[:, None, None, :]


def _seq_lengths(lengths, q, what: str):
    """``lengths`` as int32 (B,) for rank-4 ``q`` (B, T, N, H), else a precise error."""
    lengths = arr(lengths)
    if q.ndim != 4 or lengths.ndim != 1:
        raise ValueError(f"dot_product_attention: {what} needs rank-4 inputs (B, T, N, H) and a "
                         f"(B,) array of lengths; got inputs of rank {q.ndim} and {what} of rank "
                         f"{lengths.ndim}")
    if not np.issubdtype(dtype_of(lengths), np.integer):
        raise TypeError(f"dot_product_attention: {what} must be integers, got {dtype_of(lengths)}")
    env().require_eq(shape(lengths)[0], shape(q)[0], f"dot_product_attention: {what} (axis 0) "
                     f"against the batch (axis 0 of query)")
    return cast(lengths, np.dtype("int32"))


def _same_layout(q, k, v) -> None:
    """The shape relations the library call needs: batch dims equal, the key's head size
    the query's, as many values as keys."""
    e = env()
    sq, sk, sv = shape(q), shape(k), shape(v)
    for a, (dq, dk, dv) in enumerate(zip(sq[:-3], sk[:-3], sv[:-3])):
        e.require_eq(dq, dk, f"dot_product_attention: batch axis {a} of query and key")
        e.require_eq(dq, dv, f"dot_product_attention: batch axis {a} of query and value")
    e.require_eq(sq[-1], sk[-1], "dot_product_attention: head size (axis -1) of query and key")
    e.require_eq(sk[-3], sv[-3], "dot_product_attention: sequence length (axis -3) of key and value")


def _attention_kernel(q, k, v, scale: float, causal: bool):
    """The library call on rank-4 views (the batch dims merged into one); its gradient
    rule is in ``relaxjax.ad`` (``LIBRARY_VJPS``)."""
    lead = tuple(shape(q)[:-3])
    batch = prod(lead) if lead else 1
    q4, k4, v4 = (rnp.reshape(t, (batch,) + tuple(shape(t)[-3:])) for t in (q, k, v))
    dtype = dtype_of(q)
    out = call_library(attention_name(dtype, causal), q4, k4, v4, rnp.asarray(scale, dtype=dtype),
                       out=ShapeDtypeStruct(tuple(wrap_dim(d) for d in shape(q4)[:-1] + (shape(v4)[-1],)), dtype))
    return rnp.reshape(out, lead + tuple(shape(out)[1:]))


def attention_scores(q, k, v, bias, mask, scale, is_causal: bool):
    """``dot_product_attention`` with its ``T x S`` logits formed per head (bias and masks,
    any dtype): what runs where the library call does not, and what its gradient
    differentiates (``ad.LIBRARY_VJPS``)."""
    n_heads, kv_heads = int(q.shape[-2]), int(k.shape[-2])
    qh, kh, vh = (rnp.swapaxes(t, -2, -3) for t in (q, k, v))           # (..., heads, seq, H)
    if kv_heads != n_heads:
        kh = rnp.repeat(kh, n_heads // kv_heads, axis=-3)
        vh = rnp.repeat(vh, n_heads // kv_heads, axis=-3)
    logits = (qh @ rnp.swapaxes(kh, -1, -2)) * scale                     # (..., N, T, S)
    if bias is not None:
        logits = logits + bias
    keep = None if mask is None else rnp.asarray(mask)
    if is_causal:
        t_len, s_len = logits.shape[-2], logits.shape[-1]
        causal = rnp.arange(s_len)[None, :] <= rnp.arange(t_len)[:, None]
        keep = causal if keep is None else rnp.logical_and(keep, causal)
    if keep is not None:
        big = cast(-0.7 * float(np.finfo(dtype_of(logits)).max), dtype_of(logits))
        logits = rnp.where(keep, logits, big)
    return rnp.swapaxes(softmax(logits, axis=-1) @ vh, -2, -3)
