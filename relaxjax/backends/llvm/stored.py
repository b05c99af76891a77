"""An LLVM executable as one persistent-cache payload: what a fresh process needs to run it
without checking the lowered module, planning memory, emitting LLVM text or generating its
per-call Python again.

The driver keys the entry by the traced program (``jit_cache.build_cached``); this module
only says what else decides the payload (:func:`cache_key`) and writes and reads it.  The
payload is one pickle of the lowered module together with the executable's plan (slots,
host steps, memory plan, the segments with a status to check: one pickle, so the plan's
references to the module's values stay references), the compiled per-call Python
(``marshal``; the key holds Python's version) and the shared library's bytes.  Loading is
unpickle, ``dlopen`` a private copy of the library, bind the runner.  Control-flow regions
store their executables inside their parent's, recursively.  In-memory (MCJIT) code is not
stored: segments that call native library functions by process address, or no linker."""
from __future__ import annotations

import marshal
import pickle

from ...ir import regions
from . import runner_memory
from .engine import SharedModule, load_shared, machine_code_key, native_code, prepare_process, set_native_pointers
from .host import HostOp, Segment, python_library
from .native_loop import LLVMControlFlow

# Bump when the payload's layout changes (part of the key, so an old payload is never read)
FORMAT = 4


def cache_key() -> tuple | None:
    """What decides a stored executable besides the lowered module: the payload's format,
    the machine code's target and toolchain, and the memory settings the runner was
    generated under.  None when new executables compile in memory (nothing to store)."""
    if not native_code():
        return None
    return ("llvm", FORMAT, machine_code_key(), runner_memory.POOLING, runner_memory.POOL_MIN_BYTES,
            runner_memory.WORKSPACE_MAX_BYTES)


def dump(exe) -> bytes | None:
    """``exe`` as bytes for :func:`load`, or None when it (or a region's executable) holds
    in-memory code or something that does not pickle."""
    state = _state(exe)
    if state is None:
        return None
    try:
        return pickle.dumps(state, protocol=5)
    except Exception:                       # noqa: BLE001 (a constant that does not pickle)
        return None


def load(cls, data: bytes):
    """The executable ``dump`` stored (``cls``: ``LLVMExecutable``).  Raises on a payload
    that does not load; the caller builds the executable instead."""
    state = pickle.loads(data)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError("not a stored LLVM executable of this format")
    prepare_process()
    return _restore(cls, state)


def _state(exe) -> dict | None:
    lib = exe.segment_module
    if not exe.native or not isinstance(lib, SharedModule):
        return None
    control = []
    for st in exe.steps:
        runner = exe.control.get(id(st.binding)) if isinstance(st, HostOp) else None
        if runner is None:
            continue
        inner = []
        for r in regions(st.binding):
            s = _state(runner.executables[id(r)])
            if s is None:
                return None
            inner.append(s)
        control.append((st.binding, inner))
    return {"format": FORMAT, "module": exe.module, "memory_plan": exe.memory_plan, "region": exe.region,
            "python_libraries": _python_libraries(exe),
            "slot_of": exe.slot_of, "consts": exe.consts, "steps": exe.steps,
            "dim_names": exe.dim_names, "fallible": exe.fallible,
            "library": (lib.digest, lib.data, [s.name for s in exe.segments]), "natives": exe.natives,
            "control": control, "pooling": exe.pooling, "python_source": exe.python_source,
            "runner_code": marshal.dumps(exe._runner_code), "runner_data": exe._runner_data}


def _python_libraries(exe) -> dict:
    """Per library function called: whether it runs as a Python host call (the plan has it
    between segments) or natively (in a segment): the library's registration decides, and
    it may be registered otherwise in the process that loads the plan."""
    return {b.callee.name: python_library(b) for b in exe.fn.bindings if b.kind == "library"}


def _restore(cls, state: dict):
    exe = cls.restored(state["module"], state["memory_plan"])
    if _python_libraries(exe) != state["python_libraries"]:
        raise ValueError("a library function is registered otherwise than when it was stored")
    exe.region = state["region"]
    exe.slot_of, exe.consts, exe.steps = state["slot_of"], state["consts"], state["steps"]
    exe.segments = [s for s in exe.steps if isinstance(s, Segment)]
    exe.dim_names = state["dim_names"]
    exe.dim_slot = {n: k for k, n in enumerate(exe.dim_names)}
    exe.native, exe.fallible, exe._llvm_ir = True, state["fallible"], None
    exe.segment_module = load_shared(*state["library"])
    exe.natives = state["natives"]
    set_native_pointers(exe.segment_module, exe.natives)      # (ValueError: rebuilt instead)
    exe.control = {}
    for b, inner in state["control"]:
        by_region = {id(r): s for r, s in zip(regions(b), inner)}
        exe.control[id(b)] = LLVMControlFlow(b, lambda r, m=by_region: _restore(cls, m[id(r)]))
    exe.pooling, exe.python_source = state["pooling"], state["python_source"]
    exe._runner_code, exe._runner_data = marshal.loads(state["runner_code"]), state["runner_data"]
    exe._run = exe._bind_runner(exe._runner_globals())
    return exe
