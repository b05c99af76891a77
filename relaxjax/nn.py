"""Neural-network functions as composites of relaxjax.numpy (as in ``jax.nn``)."""
from __future__ import annotations

import math

from . import numpy as rnp
from . import lax
from .numpy._base import arr, cast, dtype_of


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
