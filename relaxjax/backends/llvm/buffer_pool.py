"""Memory for the LLVM backend's calls: aligned blocks, and a process-wide pool of large
blocks that outputs and intermediates are carved from and return to."""
from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict

import numpy as np

from ...compile.memplan import ALIGN

def _aligned_block(nbytes: int) -> np.ndarray:
    """A 1-d uint8 array of ``nbytes`` whose data is ``ALIGN``-byte aligned."""
    raw = np.empty(nbytes + ALIGN, np.uint8)
    off = -raw.__array_interface__["data"][0] % ALIGN
    return raw[off:off + nbytes]


def size_class(nbytes: int) -> int:
    """The size a block for ``nbytes`` is allocated at: ``nbytes`` rounded up to one of 8
    steps per power of two (at most 12.5 % more), so requests of nearby sizes (a ragged
    batch's packed rows, different every batch) share blocks instead of each mapping, and
    page-faulting, fresh memory."""
    if nbytes <= 4096:
        return nbytes
    step = 1 << max(nbytes.bit_length() - 4, 0)
    return -(-nbytes // step) * step


class BufferPool:
    """Process-wide free lists of large aligned uint8 blocks, keyed by byte size (blocks
    from ``new`` have a ``size_class``; ``take`` looks for the class of the size asked, then
    for that exact size; both hand out a view of the size asked, ``put`` takes it back
    whole).

    Bounded: at most ``max_per_size`` blocks of one size and ``max_bytes`` in all.  Sizes
    are kept least recently used first: a block that would pass ``max_bytes`` evicts (frees)
    blocks of the sizes used longest ago, so a caller whose shapes keep changing holds a
    bounded amount of recent sizes rather than filling the pool with sizes never asked for
    again (1 GiB after 20 000 calls, when new blocks were the ones dropped).  ``put`` runs
    from finalizers, i.e. in whatever
    thread the garbage collector runs, possibly while that thread is inside ``take``/``put``
    itself: it never waits for a lock its own thread holds (the block is dropped instead)."""

    def __init__(self, max_per_size: int = 8, max_bytes: int = 256 << 20):
        self.max_per_size, self.max_bytes = max_per_size, max_bytes
        self._free: OrderedDict = OrderedDict()     # byte size -> blocks, least recently used first
        self._bytes = 0
        self._lock = threading.Lock()
        self._holder = None
        self._owned: dict = {}         # id(weakref) -> (weakref, block, its _joint record or None)
        self._whole: dict = {}         # id(a view handed out) -> the class-sized block
        self._owner_of: dict = {}      # id(a block in _owned) -> its id(weakref) there
        self._joint: dict = {}         # id(a grown block) -> [owners alive, the block to put, id]
        self.hits = self.misses = self.returned = self.dropped = 0

    def take(self, nbytes: int):
        """A free block for ``nbytes`` (a view of exactly ``nbytes`` of a block of its size
        class), or None."""
        size = size_class(nbytes)
        self._acquire()
        try:
            lst = self._free.get(size)
            if not lst and size != nbytes:     # a block of exactly this size, put back whole
                size = nbytes
                lst = self._free.get(size)
            blk = lst.pop() if lst else None
            if blk is not None:
                self._bytes -= size
                self.hits += 1
                if lst:
                    self._free.move_to_end(size)
                else:
                    del self._free[size]
            else:
                self.misses += 1
        finally:
            self._release()
        return None if blk is None else self._lend(blk, nbytes)

    def new(self, nbytes: int) -> np.ndarray:
        """A fresh aligned block for ``nbytes``, allocated at its size class (a view of
        exactly ``nbytes``; ``put`` returns the whole block to the pool)."""
        return self._lend(_aligned_block(size_class(nbytes)), nbytes)

    def _lend(self, blk: np.ndarray, nbytes: int) -> np.ndarray:
        if blk.nbytes == nbytes:
            return blk
        view = blk[:nbytes]
        self._whole[id(view)] = blk
        return view

    def put_when_dead(self, owner, blk: np.ndarray) -> None:
        """Give ``blk`` back once ``owner`` is garbage collected (what ``weakref.finalize``
        does, at a third of its cost: a weak reference with a callback, kept alive here)."""
        r = weakref.ref(owner, self._dead)
        self._owned[id(r)] = (r, blk, None)
        self._owner_of[id(blk)] = id(r)

    def _dead(self, r) -> None:
        entry = self._owned.pop(id(r), None)
        if entry is None:
            return
        _, blk, joint = entry
        if joint is not None:              # a block grown into (``grow``): its last owner
            joint[0] -= 1
            if joint[0] > 0:
                return
            self._joint.pop(joint[2], None)
        self._owner_of.pop(id(blk), None)
        self.put(blk)

    def grow(self, a: np.ndarray, shape: tuple, dtype) -> np.ndarray | None:
        """``a``'s memory as a C-contiguous array of ``shape`` and ``dtype``, or None: ``a``
        must be a result from this pool (an array over a memoryview of a block lent by
        ``take``/``new`` and given back when it dies, ``RunnerMemory.out``) that starts its
        block, C-contiguous, with the block long enough.  The block goes back once ``a``,
        the new array and every other array grown in it are dead (a caller may use ``a``
        again, after donating it: it then sees the longer array's first elements)."""
        if not a.flags.c_contiguous:
            return None
        flat = a
        while isinstance(flat.base, np.ndarray):
            flat = flat.base
        if not isinstance(flat.base, memoryview) or not isinstance(flat.base.obj, np.ndarray):
            return None
        blk = flat.base.obj
        start = blk.__array_interface__["data"][0]
        itemsize = np.dtype(dtype).itemsize
        nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize
        if a.__array_interface__["data"][0] != start:
            return None
        self._acquire()
        try:
            whole = self._whole.get(id(blk), blk)
            if whole.nbytes < nbytes or whole.__array_interface__["data"][0] != start:
                return None
            joint = self._joint.get(id(whole))
            if joint is None:              # the first growth: ``a``'s owner shares the block
                rid = self._owner_of.get(id(blk))
                if rid is None:
                    return None
                r, key, _ = self._owned[rid]
                joint = self._joint[id(whole)] = [1, key, id(whole)]
                self._owned[rid] = (r, key, joint)
            joint[0] += 1
            grown = np.frombuffer(memoryview(whole), dtype, nbytes // itemsize)
            r = weakref.ref(grown, self._dead)
            self._owned[id(r)] = (r, joint[1], joint)
        finally:
            self._release()
        return grown.reshape(shape)

    def _acquire(self) -> None:
        self._lock.acquire()
        self._holder = threading.get_ident()

    def _release(self) -> None:
        self._holder = None
        self._lock.release()

    def put(self, blk: np.ndarray) -> None:
        lock = self._lock
        if not lock.acquire(blocking=False):
            if self._holder == threading.get_ident():    # re-entered from the GC: drop it
                self.dropped += 1
                return
            lock.acquire()
        try:
            self._holder = threading.get_ident()
            whole = self._whole.pop(id(blk), None)
            if whole is not None and whole.__array_interface__["data"][0] == blk.__array_interface__["data"][0]:
                blk = whole                    # the view lent: its whole block goes back
            n = blk.nbytes
            free = self._free
            if n > self.max_bytes or len(free.get(n, ())) >= self.max_per_size:
                self.dropped += 1
                return
            while self._bytes + n > self.max_bytes:          # evict the least recently used
                size, old = next(iter(free.items()))
                old.pop()
                if not old:
                    del free[size]
                self._bytes -= size
                self.dropped += 1
            free.setdefault(n, []).append(blk)
            free.move_to_end(n)
            self._bytes += n
            self.returned += 1
        finally:
            self._holder = None
            lock.release()

    def clear(self) -> None:
        self._acquire()
        try:
            self._free.clear()
            self._bytes = 0
        finally:
            self._release()

    def stats(self) -> dict:
        self._acquire()
        try:
            blocks = sum(map(len, self._free.values()))
            out = {"blocks": blocks, "bytes": self._bytes, "hits": self.hits, "misses": self.misses,
                   "returned": self.returned, "dropped": self.dropped, "in_use": len(self._owned)}
        finally:
            self._release()
        return out


def default_pool_bytes() -> int:
    """The pool's bound: 1/16 of physical memory, within [256 MiB, 2 GiB].  A memory-bound
    function returning one large array (``a + s`` on 6000 x 6000 float64: 288 MB) called in
    a loop gets its output's block back from the pool each call instead of mapping (and
    page-faulting) fresh memory, which costs more than the kernel itself when the kernel
    cannot get huge pages."""
    try:
        phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        phys = 0
    return int(min(max(phys // 16, 256 << 20), 2 << 30))


POOL = BufferPool(max_bytes=default_pool_bytes())
