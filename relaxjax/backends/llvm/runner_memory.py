"""The memory part of the LLVM backend's generated per-call Python (``RunnerMemory``):
intermediates as views of planned storages (a per-thread workspace when the plan bounds
it), results from the buffer pool."""
from __future__ import annotations

import numpy as np

from ...compile.memplan import byte_size
from ...shapes import dim_str, free_symbols
from .buffer_pool import POOL, _aligned_block

# Memory: intermediates share storage per ``plan_memory``, carved from one workspace per
# executable and thread when the plan bounds it (else per call, large ones from the pool);
# large results come from a process-wide pool and go back to it when the array the user got
# (and every view of it) is gone.  ``POOLING`` is read when an executable is built: False
# builds the plain runner (one np.empty per value per call).
POOLING = True
POOL_MIN_BYTES = 256 * 1024           # smaller buffers: plain np.empty
WORKSPACE_MAX_BYTES = 1 << 30         # a larger bound (per thread) sizes storages per call instead


# per-executable counters: calls; NumPy allocations of intermediates / of outputs; pool hits and
# misses; the allocations of intermediates / outputs in the last call
_CALLS, _ALLOC_TMP, _ALLOC_OUT, _HITS, _MISSES, _LAST_TMP, _LAST_OUT = range(7)


class RunnerMemory:
    """The memory part of the generated runner, from the executable's ``memory_plan``.

    * planned intermediates: views ``np.ndarray(shape, dtype, storage, offset)``.  With a
      workspace (the plan bounds every storage) the storages are fixed offsets in one block
      per executable and thread (``threading.local``), allocated at the thread's first call
      (and again by a call made while one runs on the thread, which must not share it);
      the views of statically shaped values are made then too and reused.  Without one each
      storage is sized per call: large ones come from ``POOL`` and go back at the end of the
      call, small ones are not worth a view and their values get plain ``np.empty``.
    * values a result is (or views): ``np.empty`` when small; when large a pooled block
      wrapped by ``np.frombuffer(memoryview(block))`` (its base a memoryview, not an
      ndarray, so NumPy does not collapse the base of user views past it) and a weak
      reference whose callback returns the block once that array and every view of it are
      gone.
    * other binding outputs (shapes bound at run time): ``np.empty``.
    Allocations are counted into the executable's ``_stats``."""

    def __init__(self, exe, g: dict):
        self.exe, self.g = exe, g
        self.plan = plan = exe.memory_plan
        self.workspace = plan.workspace_bytes is not None and bool(plan.storages) and \
            plan.workspace_bytes <= WORKSPACE_MAX_BYTES
        self.static_view: dict = {}          # Var -> index into the per-thread tuple
        st, tls, pool = exe._stats, exe._tls, POOL
        nd, frombuffer, block = np.ndarray, np.frombuffer, _aligned_block
        if self.workspace:
            static = [v for v in plan.storage_of if all(isinstance(d, int) for d in v.type.shape)]
            self.static_view = {v: k + 1 for k, v in enumerate(static)}
            specs = [(tuple(v.type.shape), v.type.dtype, plan.storage_of[v].offset) for v in static]
            nbytes = max(plan.workspace_bytes, 1)

            def new_ws():
                ws = block(nbytes)
                w = (ws,) + tuple(nd(shape, dtype, ws, off) for shape, dtype, off in specs)
                st[_ALLOC_TMP] += 1
                return w
            g["_tls"], g["_new_ws"] = tls, new_ws

        def take(n, counter=_ALLOC_TMP):
            blk = pool.take(n)
            if blk is None:
                blk = pool.new(n)
                st[_MISSES] += 1
                st[counter] += 1
            else:
                st[_HITS] += 1
            return blk

        def out(shape, dtype, n, room=0):
            blk = take(n + room, _ALLOC_OUT)
            # through a memoryview: np.frombuffer(ndarray) would make ``blk`` the base, and
            # views of the result would then keep ``blk`` alive but not ``flat``
            flat = frombuffer(memoryview(blk), dtype, n // np.dtype(dtype).itemsize if room else -1)
            pool.put_when_dead(flat, blk)
            return flat if len(shape) == 1 else flat.reshape(shape)

        def out_room(shape, dtype):
            # a result that may grow in place next call (``BufferPool.grow``): a quarter
            # more room after it (4 KiB at least), so a cache growing a row per call is
            # copied once every len / 4 calls, not every call
            n = np.dtype(dtype).itemsize
            for d in shape:
                n *= d
            return out(shape, dtype, n, max(n // 4, 4096)) if n else np.empty(shape, dtype)

        def give(*blocks):
            for b in blocks:
                if b is not None:
                    pool.put(b)
        g.update(_st=st, _nd=nd, _take=take, _out=out, _out_room=out_room, _give=give)

    def prologue(self, local: dict) -> list:
        L = [f"  _a0 = _st[{_ALLOC_TMP}]; _o0 = _st[{_ALLOC_OUT}]", "  _na = _no = 0"]
        self.sizes: dict = {}        # symbolic byte size over the input dims -> its local
        if self.workspace:
            # a call takes the thread's workspace and gives it back at its end: a call made
            # while it runs (the function again, from a Python library callback) finds none
            # and gets its own, rather than overwriting the outer call's intermediates
            return L + ["  _W = getattr(_tls, 'w', None)", "  if _W is None:", "    _W = _new_ws()",
                        "  else:", "    _tls.w = None", "  _ws = _W[0]"]
        inputs = set(self.exe.fn.dim_vars)
        for v in self.plan.unplanned:           # result sizes, computed once
            n = byte_size(v)
            if not isinstance(n, int) and free_symbols(n) <= inputs:
                self._size(n, local, L)
        groups: dict = {}
        for st in self.plan.storages:
            groups.setdefault(st.size, []).append(st)
        self.pooled = any(not isinstance(n, int) or n >= POOL_MIN_BYTES for n in groups)
        if self.pooled:
            L.append("  _pooled = False")
        for n, sts in groups.items():
            count = sum(len(st.values) for st in sts)
            take = [f"_s{st.index} = _take({self._size(n, local, L)})" for st in sts]
            none = [f"_s{st.index} = None" for st in sts] + [f"_na += {count}"]
            if isinstance(n, int):
                L.append("  " + "; ".join(take + ["_pooled = True"] if n >= POOL_MIN_BYTES else none))
            else:      # small ones are not worth a view: their values get np.empty
                L += [f"  if {self.sizes[n]} >= {POOL_MIN_BYTES}:", "    " + "; ".join(take + ["_pooled = True"]),
                      "  else:", "    " + "; ".join(none)]
        return L

    def _size(self, n, local: dict, L: list) -> str:
        if isinstance(n, int):
            return str(n)
        if n not in self.sizes:
            self.sizes[n] = f"_z{len(self.sizes)}"
            L.append(f"  {self.sizes[n]} = {_rename(n, local)}")
        return self.sizes[n]

    def allocate(self, v, shape: str, local: dict) -> list:
        k = self.exe.slot_of[v]
        plan = self.plan
        s = plan.storage_of.get(v)
        if s is not None:
            if self.workspace:
                if v in self.static_view:
                    return [f"  _b[{k}] = _W[{self.static_view[v]}]"]
                return [f"  _b[{k}] = _nd({shape}, _t{k}, _ws, {s.offset})"]
            if isinstance(s.size, int):
                return [f"  _b[{k}] = _empty({shape}, _t{k})" if s.size < POOL_MIN_BYTES else
                        f"  _b[{k}] = _nd({shape}, _t{k}, _s{s.index})"]
            return [f"  _b[{k}] = _empty({shape}, _t{k}) if _s{s.index} is None else "
                    f"_nd({shape}, _t{k}, _s{s.index})"]
        if v in plan.unplanned and plan.unplanned[v] != "shape bound at run time":
            n = byte_size(v)
            if isinstance(n, int):
                if n >= POOL_MIN_BYTES:
                    return [f"  _b[{k}] = _out({shape}, _t{k}, {n})"]
                return [f"  _b[{k}] = _empty({shape}, _t{k}); _no += 1"]
            L = []
            if n not in self.sizes:            # over dims bound while running: here
                L.append(f"  _n = {_rename(n, local)}")
            z = self.sizes.get(n, "_n")
            return L + [f"  if {z} >= {POOL_MIN_BYTES}:", f"    _b[{k}] = _out({shape}, _t{k}, {z})",
                        "  else:", f"    _b[{k}] = _empty({shape}, _t{k}); _no += 1"]
        return [f"  _b[{k}] = _empty({shape}, _t{k}); _na += 1"]

    def epilogue(self) -> list:
        L = []
        if self.workspace:
            L.append("  _tls.w = _W")
        if not self.workspace and self.plan.storages and self.pooled:
            L.append(f"  if _pooled: _give({', '.join(f'_s{s.index}' for s in self.plan.storages)},)")
        L += [f"  _st[{_ALLOC_TMP}] += _na; _st[{_ALLOC_OUT}] += _no; _st[{_CALLS}] += 1",
              f"  _st[{_LAST_TMP}] = _st[{_ALLOC_TMP}] - _a0; _st[{_LAST_OUT}] = _st[{_ALLOC_OUT}] - _o0"]
        return L


def _rename(d, local: dict) -> str:
    if isinstance(d, int):
        return str(d)
    return dim_str(d, {s.name: local[s.name] for s in free_symbols(d)})
