"""relaxjax as a peer of the shared peer benchmark (``bench_peers.py``), so relaxjax and
NumPy, numba, jax and torch are timed in the same run by the same harness.

    python benchmarks/peers.py            # finds the harness, runs it with this plugin
    python bench_peers.py --peers numpy,numba,jax,relaxjax \
        --plugin relaxjax=benchmarks/relaxjax_plugin.py:build --out rj.json

Every workload is jitted once with a symbolic batch dim ``n`` (and sequence length ``s``
for attention), so all sizes run on one compiled artifact.  ``workloads()`` is also used
by ``benchmarks/batch_sizes.py``.
"""
from __future__ import annotations

import math
import os
import sys


def _import_relaxjax():
    """Import relaxjax, falling back to this checkout when it is not installed."""
    try:
        import relaxjax
    except ImportError:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import relaxjax
    return relaxjax


def workloads():
    """The five reference workloads written against relaxjax.numpy (float32 throughout)."""
    rj = _import_relaxjax()
    import relaxjax.numpy as rnp
    from relaxjax import nn

    S = rj.ShapeDtypeStruct
    GELU_C = math.sqrt(2.0 / math.pi)

    def w1(x):
        return rnp.tanh(rnp.exp(x) * 2.0 + 1.0) - x

    def w2(x):
        return nn.softmax(x, axis=-1)

    def w3(x, g, b):
        mu = rnp.mean(x, axis=-1, keepdims=True)
        xc = x - mu
        var = rnp.mean(xc * xc, axis=-1, keepdims=True)
        return xc * (1.0 / rnp.sqrt(var + 1e-5)) * g + b

    def gelu(h):
        return 0.5 * h * (1.0 + rnp.tanh(GELU_C * (h + 0.044715 * h * h * h)))

    def w4(x, W1, b1, W2, b2):
        return gelu(x @ W1 + b1) @ W2 + b2

    def w5(q, k, v):
        s = (q @ k.T) * (1.0 / math.sqrt(q.shape[-1]))
        return nn.softmax(s, axis=-1) @ v

    f32 = "float32"
    return {
        "W1": rj.jit(w1, shapes=(S(("n", 1024), f32),)),
        "W2": rj.jit(w2, shapes=(S(("n", 1024), f32),)),
        "W3": rj.jit(w3, shapes=(S(("n", 768), f32), S((768,), f32), S((768,), f32))),
        "W4": rj.jit(w4, shapes=(S(("n", 512), f32), S((512, 2048), f32), S((2048,), f32),
                                 S((2048, 512), f32), S((512,), f32))),
        "W5": rj.jit(w5, shapes=(S(("s", 64), f32),) * 3),
    }


ARGS = {"W1": ["x"], "W2": ["x"], "W3": ["x", "g", "b"], "W4": ["x", "W1", "b1", "W2", "b2"],
        "W5": ["q", "k", "v"]}


def build(threads):
    import numpy as np
    relaxjax = _import_relaxjax()
    from relaxjax.backends import llvm as rj_llvm
    rj_llvm.set_num_threads(threads)
    fns = workloads()
    peer = {wl: {"fn": fn, "prep": (lambda inp, names=ARGS[wl]: [inp[k] for k in names]),
                 "sync": lambda o: None, "to_np": lambda o: np.asarray(o)}
            for wl, fn in fns.items()}
    return {"relaxjax": peer}, {"relaxjax": relaxjax.__version__, "backend": "llvm",
                              "threads": threads}
