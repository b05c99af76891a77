"""Library calls (``call_library``) on the CUDA backend, and the CuPy implementations of the
``linalg.*`` functions that :mod:`relaxjax.numpy.linalg` registers.

On a GPU a call runs the registered ``cuda`` implementation on CuPy arrays (one marked
``device_kernel``, relaxjax's own kernels, takes the device first and runs on the emulator
too); a function
registered for the host only (``numpy=`` or a native ``cpu=``) runs on copies of its operands
on the host.  On the emulator (NumPy arrays) the ``numpy`` implementation runs (see
:mod:`relaxjax.library`).  The ``linalg.*``
functions take float64 stacks of matrices (..., m, n) and write their outputs in place, like
``numpy.linalg`` run on the same arrays; singular matrices raise
``numpy.linalg.LinAlgError`` (``cupyx.errstate(linalg="raise")``).
"""
from __future__ import annotations

import contextlib

import numpy as np

from ...library import contiguous, lookup


def library_runner(name: str, device):
    """``call(inputs, outputs)`` running library function ``name`` on ``device``'s arrays."""
    impl = lookup(name)
    kernel = impl.cuda if impl.cuda is not None and getattr(impl.cuda, "device_kernel", False) else None
    if kernel is not None:
        # relaxjax's own CUDA kernels (attention): on the GPU and on the emulator alike
        def call(inputs, outputs):
            kernel(device, *inputs, *outputs)
        return call
    if device.name == "cuda" and impl.cuda is not None:
        fn = impl.cuda

        def call(inputs, outputs):
            status = fn(*inputs, *outputs)
            if isinstance(status, (int, np.integer)) and not isinstance(status, bool) and status:
                impl.raise_status(status)
        return call
    if impl.numpy is None and impl.cpu_native is None:
        raise impl.missing(device.name, "cuda" if device.name == "cuda" else "numpy")
    if device.name == "cuda":
        # registered for the host only: run there, as jax.pure_callback does (the operands
        # are copied to the host and the results back)
        def call(inputs, outputs):
            host = [np.empty(o.shape, o.dtype) for o in outputs]
            impl.run_numpy([contiguous(device.to_host(x)) for x in inputs], host)
            for o, h in zip(outputs, host):
                o[...] = device.asarray(h)
        return call

    def call(inputs, outputs):        # the emulator: NumPy arrays
        impl.run_numpy([contiguous(x) for x in inputs], outputs)
    return call


@contextlib.contextmanager
def _raising(message: str = "Singular matrix"):
    """Failures raise ``numpy.linalg.LinAlgError`` with NumPy's message (cuSOLVER's status
    text is kept as the cause)."""
    import cupyx
    try:
        with cupyx.errstate(linalg="raise"):
            yield
    except np.linalg.LinAlgError as e:
        raise np.linalg.LinAlgError(message) from e


def solve(a, bt, xt):
    import cupy
    with _raising():
        xt[...] = cupy.linalg.solve(a, bt.swapaxes(-1, -2)).swapaxes(-1, -2)


def inv(a, out):
    import cupy
    with _raising():
        out[...] = cupy.linalg.inv(a)


def _packed(x):
    """A float64 (..., 2) array as the complex128 array it holds (no copy)."""
    return x.view("complex128")[..., 0]


def zsolve(a, bt, xt):
    import cupy
    with _raising():
        _packed(xt)[...] = cupy.linalg.solve(_packed(a), _packed(bt).swapaxes(-1, -2)).swapaxes(-1, -2)


def zinv(a, out):
    import cupy
    with _raising():
        _packed(out)[...] = cupy.linalg.inv(_packed(a))


def det(a, out):
    import cupy
    out[...] = cupy.linalg.det(a)


def cholesky(a, out):
    import cupy
    a2, o2 = a.reshape((-1,) + a.shape[-2:]), out.reshape((-1,) + out.shape[-2:])
    with _raising("Matrix is not positive definite"):
        for i in range(a2.shape[0]):
            o2[i] = cupy.linalg.cholesky(a2[i])


def qr(a, q, r):
    import cupy
    a2, q2, r2 = (x.reshape((-1,) + x.shape[-2:]) for x in (a, q, r))
    for i in range(a2.shape[0]):
        q2[i], r2[i] = cupy.linalg.qr(a2[i], mode="reduced")


def _per_matrix(fn, a, outs: tuple, core_dims: tuple) -> None:
    """Run ``fn(matrix)`` on each matrix of the stack ``a``, writing its results to
    ``outs`` (each with ``core_dims`` trailing dims of its own)."""
    a2 = a.reshape((-1,) + a.shape[-2:])
    o2 = [o.reshape((-1,) + o.shape[o.ndim - k:]) for o, k in zip(outs, core_dims)]
    for i in range(a2.shape[0]):
        res = fn(a2[i])
        for o, r in zip(o2, res if isinstance(res, tuple) else (res,)):
            o[i] = r


def eigh(a, w, v):
    import cupy
    _per_matrix(cupy.linalg.eigh, a, (w, v), (1, 2))


def eigvalsh(a, w):
    import cupy
    _per_matrix(cupy.linalg.eigvalsh, a, (w,), (1,))


def svd(a, u, s, vh):
    import cupy
    _per_matrix(lambda m: tuple(cupy.linalg.svd(m, full_matrices=True)), a, (u, s, vh), (2, 1, 2))


def svd_reduced(a, u, s, vh):
    import cupy
    _per_matrix(lambda m: tuple(cupy.linalg.svd(m, full_matrices=False)), a, (u, s, vh), (2, 1, 2))


def svdvals(a, s):
    import cupy
    _per_matrix(lambda m: cupy.linalg.svd(m, compute_uv=False), a, (s,), (1,))
