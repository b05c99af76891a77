"""NPBench's deep-learning kernels (npbench/benchmarks/deep_learning/*), NHWC layout."""
from __future__ import annotations

import numpy as np

from . import register
from ._loops import dynamic_slice, fori_loop

SRC = "deep_learning/"


def _f32(rng, *shape):
    return rng.random(shape, dtype=np.float32)


def relu(x):
    return np.maximum(x, 0)


def conv2d(x, w):
    """Valid 2-D convolution (cross-correlation), x: (N, H, W, Cin), w: (K, K, Cin, Cout),
    written the way a JAX user writes it shape-generic: a ``fori_loop`` over the K*K taps,
    each adding its shifted window (``dynamic_slice``) times that tap's (Cin, Cout)
    weights, so K stays a dim (one compile for every kernel size)."""
    k = w.shape[0]
    n, h, wd, c = x.shape[0], x.shape[1] - k + 1, x.shape[2] - k + 1, x.shape[3]

    def tap(t, acc):
        di, dj = t // k, t % k
        return acc + dynamic_slice(x, (0, di, dj, 0), (n, h, wd, c)) @ w[di, dj]
    return fori_loop(0, k * k, tap, np.zeros((n, h, wd, w.shape[3]), x.dtype))


def _conv_ref(x, w):
    k = w.shape[0]
    n, h, wd = x.shape[0], x.shape[1] - k + 1, x.shape[2] - k + 1
    out = np.zeros((n, h, wd, w.shape[3]))
    for i in range(h):
        for j in range(wd):
            out[:, i, j, :] = np.einsum("nabc,abcd->nd", x[:, i:i + k, j:j + k, :], w)
    return out


def maxpool2d(x):
    """2x2 max pooling with stride 2 (an odd last row or column is dropped)."""
    n, h, w, c = x.shape
    x = x[:, :h // 2 * 2, :w // 2 * 2, :]
    return np.max(np.reshape(x, (n, h // 2, 2, w // 2, 2, c)), axis=(2, 4))


def _pool_ref(x):
    n, h, w, c = x.shape
    out = np.empty((n, h // 2, w // 2, c))
    for i in range(h // 2):
        for j in range(w // 2):
            out[:, i, j, :] = x[:, 2 * i:2 * i + 2, 2 * j:2 * j + 2, :].max(axis=(1, 2))
    return out


@register("conv2d_bias", SRC + "conv2d_bias", "input weights bias", rtol=1e-4,
          ref=lambda x, w, b: _conv_ref(x, w) + b, sizes=(1, 5),
          inputs=lambda r, s: dict(input=_f32(r, s, s + 3, s + 4, 3),
                                   weights=_f32(r, 3, 3, 3, 4), bias=_f32(r, 4)))
def conv2d_bias(input, weights, bias):
    """deep_learning/conv2d_bias: a valid 2-D convolution plus a bias."""
    return conv2d(input, weights) + bias


def _lenet_ref(x, c1, c1b, c2, c2b, f1w, f1b, f2w, f2b, f3w, f3b):
    x = _pool_ref(np.maximum(_conv_ref(x, c1) + c1b, 0))
    x = _pool_ref(np.maximum(_conv_ref(x, c2) + c2b, 0))
    x = x.reshape(x.shape[0], -1)
    x = np.maximum(x @ f1w + f1b, 0)
    x = np.maximum(x @ f2w + f2b, 0)
    return x @ f3w + f3b


def _lenet_inputs(r, s):
    h = 16 + 4 * (s % 2)                     # 16 -> 12 -> 6 -> 2 -> 1 ; 20 -> 16 -> 8 -> 4 -> 2
    p = ((h - 4) // 2 - 4) // 2
    c = 16 * p * p
    return dict(input=_f32(r, s, h, h, 1), conv1=_f32(r, 5, 5, 1, 6), conv1bias=_f32(r, 6),
                conv2=_f32(r, 5, 5, 6, 16), conv2bias=_f32(r, 16), fc1w=_f32(r, c, 120) / 50,
                fc1b=_f32(r, 120), fc2w=_f32(r, 120, 84) / 50, fc2b=_f32(r, 84),
                fc3w=_f32(r, 84, 10) / 50, fc3b=_f32(r, 10))


@register("lenet", SRC + "lenet", "input conv1 conv1bias conv2 conv2bias fc1w fc1b fc2w fc2b "
          "fc3w fc3b", rtol=1e-4, ref=_lenet_ref, inputs=_lenet_inputs, sizes=(1, 3))
def lenet(input, conv1, conv1bias, conv2, conv2bias, fc1w, fc1b, fc2w, fc2b, fc3w, fc3b):
    """deep_learning/lenet: LeNet-5 inference (two conv + relu + max-pool stages, three
    dense layers)."""
    x = maxpool2d(relu(conv2d(input, conv1) + conv1bias))
    x = maxpool2d(relu(conv2d(x, conv2) + conv2bias))
    x = np.reshape(x, (x.shape[0], -1))
    x = relu(x @ fc1w + fc1b)
    x = relu(x @ fc2w + fc2b)
    return x @ fc3w + fc3b


def softmax(x):
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def _softmax_ref(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@register("mlp", SRC + "mlp", "input w1 b1 w2 b2 w3 b3", rtol=1e-4,
          ref=lambda x, w1, b1, w2, b2, w3, b3: _softmax_ref(
              np.maximum(np.maximum(x @ w1 + b1, 0) @ w2 + b2, 0) @ w3 + b3),
          inputs=lambda r, s: dict(input=_f32(r, s, 3), w1=_f32(r, 3, s + 8), b1=_f32(r, s + 8),
                                   w2=_f32(r, s + 8, 9) / 8, b2=_f32(r, 9),
                                   w3=_f32(r, 9, 5) / 8, b3=_f32(r, 5)))
def mlp(input, w1, b1, w2, b2, w3, b3):
    """deep_learning/mlp: three dense layers, relu, relu, softmax."""
    x = relu(input @ w1 + b1)
    x = relu(x @ w2 + b2)
    return softmax(x @ w3 + b3)


def batchnorm2d(x, eps=1e-5):
    """NPBench's batch norm over the batch axis: (x - mean) / sqrt(std + eps)."""
    mean = np.mean(x, axis=0, keepdims=True)
    std = np.std(x, axis=0, keepdims=True)
    return (x - mean) / np.sqrt(std + eps)


def _bn_ref(x, eps=1e-5):
    return (x - x.mean(0, keepdims=True)) / np.sqrt(x.std(0, keepdims=True) + eps)


def _resnet_ref(x, c1, c2, c3):
    p = np.pad(_conv_ref(x, c1), ((0, 0), (1, 1), (1, 1), (0, 0)))
    y = np.maximum(_bn_ref(p), 0)
    y = np.maximum(_bn_ref(_conv_ref(y, c2)), 0)
    y = _bn_ref(_conv_ref(y, c3))
    return np.maximum(y + x, 0)


@register("resnet", SRC + "resnet", "input conv1 conv2 conv3", rtol=1e-3, ref=_resnet_ref,
          sizes=(2, 3),
          inputs=lambda r, s: dict(input=_f32(r, s, s + 2, s + 3, 8), conv1=_f32(r, 1, 1, 8, 4),
                                   conv2=_f32(r, 3, 3, 4, 4), conv3=_f32(r, 1, 1, 4, 8)))
def resnet(input, conv1, conv2, conv3):
    """deep_learning/resnet: a ResNet basic block (1x1, 3x3 and 1x1 convolutions, each
    followed by NPBench's batch norm, relus, and the residual)."""
    x = np.pad(conv2d(input, conv1), ((0, 0), (1, 1), (1, 1), (0, 0)))
    x = relu(batchnorm2d(x))
    x = relu(batchnorm2d(conv2d(x, conv2)))
    x = batchnorm2d(conv2d(x, conv3))
    return relu(x + input)


@register("softmax", SRC + "softmax", "x", rtol=1e-4, ref=_softmax_ref,
          inputs=lambda r, s: dict(x=_f32(r, s, 2, s + 1, s + 1)))
def softmax_kernel(x):
    """deep_learning/softmax: softmax over the last axis of a 4-D attention tensor."""
    return softmax(x)
