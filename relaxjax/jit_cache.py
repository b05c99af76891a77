"""The persistent cache of what a traced module becomes, keyed by the traced module
(``build_cached``): a backend's whole executable, for backends that can store one (a warm
start traces, keys and loads), else the lowered module (the pass pipeline runs once per
traced module across processes; the backend then compiles, caching its code keyed by the
code)."""
from __future__ import annotations

import io
import logging
import os
import pickle
import sys
import types
from typing import Any, Callable

import numpy as np
import sympy

from . import cache
from .compile.passes import run_pipeline
from .ir import IRModule

log = logging.getLogger("relaxjax.cache")

_LOWERED_MAX_BYTES = 16 << 20
# modules whose functions and classes the key may name (pickle stores them by name): their
# code is covered by the source digest or the versions in the key
_KEY_MODULES = ("relaxjax", "numpy", "sympy", "builtins", "math", "operator", "collections", "fractions")


class _KeyPickler(pickle.Pickler):
    """Pickles the traced module for the key, refusing functions and classes from elsewhere
    (a user's callable stored by name could change without the key changing)."""

    def reducer_override(self, obj):
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            mod = getattr(obj, "__module__", None) or ""
            if mod.split(".")[0] not in _KEY_MODULES:
                raise pickle.PicklingError(f"{obj!r} from {mod or 'an unknown module'} in a traced module")
        return NotImplemented


def traced_key(module: IRModule, pipeline: list) -> tuple | None:
    """The key parts naming what ``pipeline`` makes of the traced ``module``: the pickled
    module (all the pipeline reads), the passes' names, relaxjax's source digest and the
    versions of Python, NumPy and SymPy.  None when nothing is cached: the cache is off, IR
    dumps or verification are asked for, or the module does not pickle or pickles to more
    than ``_LOWERED_MAX_BYTES`` (large constants)."""
    if not cache.enabled() or os.environ.get("RELAXJAX_DUMP_IR", "0") not in ("", "0") or \
            os.environ.get("RELAXJAX_VERIFY", "0") not in ("", "0"):
        return None
    try:
        buf = io.BytesIO()
        _KeyPickler(buf, protocol=5).dump(module)
        traced = buf.getvalue()
    except Exception:                        # noqa: BLE001 (a value that does not pickle)
        return None
    if len(traced) > _LOWERED_MAX_BYTES:     # large constants: not worth a disk entry
        return None
    return (traced, tuple(p.name for p in pipeline), cache.source_digest(),
            "%d.%d" % sys.version_info[:2], np.__version__, sympy.__version__)


def build_cached(module: IRModule, pipeline: list, backend_name: str,
                 backend: Callable) -> tuple[IRModule, Any]:
    """(lowered module, executable) of the traced ``module`` on the backend registered as
    ``backend_name`` (``backend``: its compile function).  A backend whose executables can be stored whole has
    ``backend.cache_key()`` (what decides the executable besides the lowered module, or
    None to store nothing), ``backend.from_cache(bytes)`` and ``executable.to_cache()``
    (bytes, or None for one that cannot be stored): then a warm start traces, keys and
    loads, with no pass, memory planning or code generation.  Otherwise the lowered module
    is stored (the pipeline runs once per traced module across processes) and the backend
    compiles it, caching its code keyed by the code.  An entry that does not load is
    ignored and rewritten; with no key (:func:`traced_key`) the pipeline just runs."""
    parts = traced_key(module, pipeline)
    if parts is None:
        lowered = run_pipeline(module, pipeline)
        return lowered, backend(lowered)
    key_of = getattr(backend, "cache_key", None)
    extra = key_of() if key_of is not None else None
    exe_parts = (*parts, backend_name, extra)
    data = cache.get("executable", exe_parts) if extra is not None else None
    if data is not None:
        try:
            exe = backend.from_cache(data)
            return exe.module, exe
        except Exception as e:               # noqa: BLE001 (stale or damaged: build it again)
            log.info("relaxjax cache: ignoring a stored executable that does not load (%s)", e)
    lowered, ran = _lower(module, pipeline, parts)
    exe = backend(lowered)
    data = exe.to_cache() if extra is not None else None
    if data is not None:
        cache.put("executable", exe_parts, data)
    elif ran:                                # the lowered module alone, at least
        _store_lowered(parts, lowered)
    return lowered, exe


def _lower(module: IRModule, pipeline: list, parts: tuple | None) -> tuple[IRModule, bool]:
    """The lowered module from the cache's entry under ``parts``, else from the pipeline
    (then True: whether the pipeline ran)."""
    data = cache.get("lowered", parts) if parts is not None else None
    if data is not None:
        try:
            lowered = pickle.loads(data)
            if isinstance(lowered, IRModule):
                return lowered, False
        except Exception as e:               # noqa: BLE001 (stale or damaged: recompute)
            log.info("relaxjax cache: ignoring a lowered module that does not load (%s)", e)
    return run_pipeline(module, pipeline), True


def _store_lowered(parts: tuple, lowered: IRModule) -> None:
    try:
        cache.put("lowered", parts, pickle.dumps(lowered, protocol=5))
    except Exception as e:                   # noqa: BLE001
        log.info("relaxjax cache: not storing a lowered module that does not pickle (%s)", e)
