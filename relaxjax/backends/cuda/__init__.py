"""The CUDA backend: loop-level programs as CUDA C kernels (``codegen.emit_cuda``), compiled
by NVRTC and launched through CuPy; matmul through cuBLAS.  ``backend="cuda-emulated"``
runs the same generated code on the CPU (see ``device.EmulatedDevice``): the tests' way to
execute it without a GPU."""
from __future__ import annotations

import functools
import os

from ..registry import register_backend
from .codegen import CudaKernel, emit_cuda  # noqa: F401
from .device import CupyDevice, EmulatedDevice
from .runtime import CudaExecutable


@functools.lru_cache(maxsize=None)
def cupy_device() -> CupyDevice:
    return CupyDevice()


@functools.lru_cache(maxsize=None)
def emulated_device() -> EmulatedDevice:
    return EmulatedDevice()


@functools.lru_cache(maxsize=None)
def gpu_available() -> bool:
    """CuPy imports and sees a GPU."""
    try:
        cupy_device()
    except (ImportError, RuntimeError):
        return False
    return True


def _cuda(module) -> CudaExecutable:
    return CudaExecutable(module, cupy_device)


def _emulated(module) -> CudaExecutable:
    return CudaExecutable(module, emulated_device)


register_backend("cuda", _cuda, available=gpu_available)
# the emulator is slow: the whole suite runs on it only when asked (RELAXJAX_TEST_EMULATED=1)
register_backend("cuda-emulated", _emulated, available=lambda: os.environ.get("RELAXJAX_TEST_EMULATED") == "1")
