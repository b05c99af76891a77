"""Where generated CUDA code runs: a GPU through CuPy, or the CPU emulator.

Both devices take the same CUDA C module (``prelude.PRELUDE`` + the kernels) and offer the
same few operations to the executable: move arrays, allocate, load a module, launch a
kernel, multiply matrices.  The executable (``runtime.CudaExecutable``) is written against
this interface only, so the emulator tests the whole backend — code generation, launch
configuration, memory plan, library calls — on machines without a GPU.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
import threading

import numpy as np

from ... import cache
from ...tir.index_checks import data_index_checks
from .prelude import EMULATOR_HEADER, PRELUDE
from .scalar_ops import memtype

_LOCK = threading.Lock()


def module_source(kernels: list) -> str:
    return PRELUDE + "\n\n" + "\n\n".join(k.source for k in kernels) + "\n"


# NumPy's semantics: subnormal floats kept, divisions and square roots correctly rounded.
# (CuPy's RawModule appends -ftz=true to any options, which flushes subnormals in every
# float32 instruction, so the module is compiled here through NVRTC and loaded as a cubin.)
NVRTC_OPTIONS = ("-std=c++17", "--ftz=false", "--prec-div=true", "--prec-sqrt=true")


class CupyDevice:
    """A CUDA GPU through CuPy: NVRTC compiles each module once to a cubin for this GPU
    (kept in relaxjax's on-disk cache, keyed by source, options, architecture and NVRTC's
    version), kernels launch on CuPy's current stream, arrays come from CuPy's memory pool,
    matmul goes to cuBLAS."""
    name = "cuda"
    threads_per_block = 256

    def __init__(self):
        try:
            import cupy
        except ImportError as e:
            raise ImportError("the CUDA backend needs CuPy: pip install 'relaxjax[cuda]' "
                              "(or a cupy-cuda12x/13x wheel matching your driver)") from e
        try:
            n = cupy.cuda.runtime.getDeviceCount()
        except Exception as e:       # noqa: BLE001  (CuPy raises its own runtime errors)
            raise RuntimeError(f"the CUDA backend found no usable GPU: {e}") from None
        if n == 0:
            raise RuntimeError("the CUDA backend found no GPU")
        self.cp = cupy
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        self.max_blocks = int(props["multiProcessorCount"]) * 32
        self.arch = f"sm_{props['major']}{props['minor']}"
        self._functions: dict = {}      # phase name -> loaded kernel, across modules

    def is_array(self, x) -> bool:
        return isinstance(x, self.cp.ndarray)

    def asarray(self, x):
        x = self.cp.asarray(x)          # (ascontiguousarray would make a 0-d array 1-d)
        return x if x.flags.c_contiguous else self.cp.ascontiguousarray(x)

    def to_host(self, x) -> np.ndarray:
        return self.cp.asnumpy(x)

    def empty(self, shape, dtype):
        return self.cp.empty(shape, dtype)

    def load(self, kernels: list) -> dict:
        """The launchable functions of ``kernels``; those not loaded yet are compiled as one
        module."""
        with _LOCK:
            missing = [k for k in kernels if any(ph.name not in self._functions for ph in k.phases)]
            if missing:
                mod = self.cp.cuda.function.Module()
                mod.load(self._cubin(module_source(missing)))
                for k in missing:
                    for ph in k.phases:
                        self._functions[ph.name] = mod.get_function(ph.name)
            return {ph.name: self._functions[ph.name] for k in kernels for ph in k.phases}

    @functools.cached_property
    def _nvrtc_target(self) -> tuple:
        """(NVRTC's options for this GPU, NVRTC's version): once per device."""
        from cupy_backends.cuda.libs import nvrtc
        arch = self.arch
        try:                                    # a GPU newer than this NVRTC: its newest
            supported = nvrtc.getSupportedArchs()
            if int(arch[3:]) not in supported:
                arch = f"sm_{max(a for a in supported if a <= int(arch[3:]))}"
        except RuntimeError:
            pass
        return NVRTC_OPTIONS + (f"--gpu-architecture={arch}",), nvrtc.getVersion()

    def _cubin(self, source: str) -> bytes:
        from cupy_backends.cuda.libs import nvrtc
        options, version = self._nvrtc_target
        parts = (source, options, version)
        data = cache.get("cuda", parts)
        if data is not None:
            return data
        prog = nvrtc.createProgram(source, "relaxjax.cu", (), ())
        try:
            try:
                nvrtc.compileProgram(prog, options)
            except nvrtc.NVRTCError:
                raise RuntimeError("NVRTC could not compile relaxjax's generated CUDA module:\n"
                                   + nvrtc.getProgramLog(prog)[-4000:]) from None
            data = nvrtc.getCUBIN(prog)
        finally:
            nvrtc.destroyProgram(prog)
        cache.put("cuda", parts, data)
        return data

    def launch(self, fn, grid: int, block: int, buffers: list, dims: list) -> None:
        fn((grid,), (block,), tuple(buffers) + tuple(d if self.is_array(d) else np.int64(d) for d in dims))

    def matmul(self, a, b, out) -> None:
        self.cp.matmul(a, b, out=out)


class EmulatedDevice:
    """Runs the generated CUDA C on the CPU, for tests without a GPU: the module is compiled
    by the host C++ compiler with ``RJ_EMULATE`` (see ``prelude.EMULATOR_HEADER``); a launch
    runs the blocks in turn, each as an OpenMP team of ``blockDim.x`` threads.  Small blocks
    and grids (two warps, four blocks) make every grid-stride and cross-warp path run on
    small inputs.  Slow; arrays are NumPy arrays."""
    name = "cuda-emulated"
    threads_per_block = 64
    max_blocks = 4
    arch = "emulated"

    def __init__(self):
        self.cxx = os.environ.get("CXX", "g++")
        self._functions: dict = {}
        # one folder per header version: processes running other versions share /tmp
        tag = hashlib.sha256(EMULATOR_HEADER.encode()).hexdigest()[:12]
        self.dir = os.path.join(tempfile.gettempdir(), f"relaxjax-cuda-emulated-{os.getuid()}", tag)
        os.makedirs(self.dir, exist_ok=True)
        header = os.path.join(self.dir, "rj_emulate.h")
        tmp = f"{header}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(EMULATOR_HEADER)
        os.replace(tmp, header)

    def is_array(self, x) -> bool:
        return isinstance(x, np.ndarray)

    def asarray(self, x):
        x = np.asarray(x)
        return x if x.flags.c_contiguous else np.ascontiguousarray(x)

    def to_host(self, x) -> np.ndarray:
        return np.asarray(x)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def load(self, kernels: list) -> dict:
        with _LOCK:
            missing = [k for k in kernels if any(ph.name not in self._functions for ph in k.phases)]
            if missing:
                src = "#define RJ_EMULATE 1\n" + module_source(missing) + "\n" + \
                    "\n".join(_launcher(k, ph) for k in missing for ph in k.phases)
                lib = self._build(src, hashlib.sha256(src.encode()).hexdigest()[:24])
                for k in missing:
                    for ph in k.phases:
                        fn = getattr(lib, f"rj_launch_{ph.name}")
                        fn.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p]
                        fn.restype = ctypes.c_int
                        self._functions[ph.name] = fn
            return {ph.name: self._functions[ph.name] for k in kernels for ph in k.phases}

    def _build(self, src: str, key: str):
        so = os.path.join(self.dir, f"m{key}.so")
        if not os.path.exists(so):
            cpp = os.path.join(self.dir, f"m{key}.{os.getpid()}.cpp")
            with open(cpp, "w") as f:
                f.write(src)
            tmp = f"{so}.{os.getpid()}.tmp"
            r = subprocess.run([self.cxx, "-std=c++17", "-O0", "-fopenmp", "-fPIC", "-shared",
                                "-w", "-I", self.dir, "-o", tmp, cpp], capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(f"the CUDA emulator could not compile the generated module "
                                   f"({cpp}):\n{r.stderr[-4000:]}")
            os.replace(tmp, so)
            os.unlink(cpp)
        return ctypes.CDLL(so)

    def launch(self, fn, grid: int, block: int, buffers: list, dims: list) -> None:
        """``dims``: the kernel's integer parameters after its buffers (a trailing
        ``(array, int)`` pair is a two-stage reduction's partials and their count)."""
        ints = [d if isinstance(d, (int, np.integer)) else d.ctypes.data for d in dims]
        slots = np.array([b.ctypes.data for b in buffers] + [int(d) for d in ints] or [0], np.uint64)
        if fn(grid, block, slots.ctypes.data) != 0:
            raise RuntimeError(f"the CUDA emulator could not start {block} threads per block")

    def matmul(self, a, b, out) -> None:
        np.matmul(a, b, out=out)


def _launcher(k, ph) -> str:
    """``int rj_launch_<phase>(grid, block, uint64_t *args)`` for the emulator."""
    if getattr(k, "param_types", None) is not None:       # a hand-written kernel (HandKernel)
        return launcher_source(ph.name, [f"({t})args[{i}]" for i, t in enumerate(k.param_types)])
    f = k.func
    n_in = len(f.params) - f.n_outputs
    args = [f"({'const ' if i < n_in else ''}{memtype(b.dtype)} *)args[{i}]" for i, b in enumerate(f.params)]
    args += [f"(int64_t)args[{len(f.params) + i}]" for i in range(len(f.dim_vars))]
    k0 = len(f.params) + len(f.dim_vars)
    if ph.partial_bytes:
        args += [f"(unsigned char *)args[{k0}]", f"(int64_t)args[{k0 + 1}]"]
        k0 += 2
    if data_index_checks(f):
        args.append(f"(unsigned long long *)args[{k0}]")
    return launcher_source(ph.name, args)


def launcher_source(name: str, args: list) -> str:
    """The emulator's entry for kernel ``name``: runs the grid's blocks in turn, each as an
    OpenMP team of ``block`` threads, passing ``args`` (C expressions over ``args[i]``)."""
    return f"""extern "C" int rj_launch_{name}(unsigned grid, unsigned block, uint64_t *args) {{
  omp_set_dynamic(0);
  gridDim = rj_dim3{{grid, 1, 1}}; blockDim = rj_dim3{{block, 1, 1}};
  int ok = 1;
  for (unsigned bx = 0; bx < grid; ++bx) {{
    #pragma omp parallel num_threads(block)
    {{
      if (omp_get_num_threads() != (int)block) {{
        #pragma omp atomic write
        ok = 0;
      }} else {{
        blockIdx = rj_dim3{{bx, 0, 0}}; threadIdx = rj_dim3{{(unsigned)omp_get_thread_num(), 0, 0}};
        {name}({", ".join(args)});
      }}
    }}
    if (!ok) return 1;
  }}
  return 0;
}}"""
