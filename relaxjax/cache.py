"""A persistent cache of compiled artifacts, shared by processes through the file system.

Backends store what is expensive to produce (the LLVM backend: a shared library per LLVM
module; a CUDA backend: cubin or PTX) under a key they choose, and a later process loads it
instead of compiling again::

    parts = (module_text, target_name, toolchain_version)   # whatever decides the artifact
    data = cache.get("llvm", parts)                          # bytes, or None
    if data is None:
        data = compile(...)
        cache.put("llvm", parts, data)

The key is a sha256 over the kind, relaxjax's version, the format version and every part,
so a key part must name everything the artifact depends on (generated code, target, the
versions of the compilers used).  An entry is one file: the payload followed by a trailer
(sha256 of the payload, the key, the payload length, relaxjax's version, the format version,
a magic number).  The payload starts at offset 0 and the trailer is past the end of what
ELF headers describe, but a loader should ``dlopen`` a private copy of what :func:`get`
returns, never the entry itself: another process may truncate or rewrite the entry, and
code mapped from it would then fault.  Only regular files of at most ``MAX_ENTRY_BYTES``
are read (no FIFO, device or symbolic link: see ``_read_regular``).
Every read checks the trailer and the payload's hash: a truncated, corrupted or foreign
file is ignored (never loaded) and the caller's ``put`` replaces it.  Writes go to a
temporary file in the same directory, renamed over the entry (``os.replace``, atomic on
POSIX), so processes writing the same entry at once each leave a complete file and readers
never see a partial one.

Settings (read at every use): ``RELAXJAX_CACHE=0`` turns the cache off;
``RELAXJAX_CACHE_DIR`` moves it (default ``$XDG_CACHE_HOME/relaxjax``, else
``~/.cache/relaxjax``).  ``python -m relaxjax cache info|clear`` inspects or empties it.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import struct
import tempfile
from pathlib import Path
from typing import Iterable

from ._version import __version__

FORMAT_VERSION = 1
MAGIC = b"RJXCACHE"
# sha256(payload), key digest, payload length, relaxjax version, format version, magic
_TRAILER = struct.Struct("<32s32sQ16sI8s")
_KIND = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_ENTRY = re.compile(r"^[0-9a-f]{64}(\.[a-z0-9]+)?$")
TMP_PREFIX = ".tmp-"

log = logging.getLogger("relaxjax.cache")

# counters for this process: entries read, missing, rejected (bad trailer or hash), written
_STATS = {"hits": 0, "misses": 0, "rejected": 0, "writes": 0, "write_errors": 0}


def enabled() -> bool:
    """False when ``RELAXJAX_CACHE`` is 0 / false / off / no."""
    return os.environ.get("RELAXJAX_CACHE", "1").strip().lower() not in ("0", "false", "off", "no")


def cache_dir() -> Path:
    d = os.environ.get("RELAXJAX_CACHE_DIR")
    if d:
        return Path(d).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "relaxjax"


def key(kind: str, key_parts: Iterable) -> str:
    """The hex sha256 naming an entry; each part (str, bytes, int, None or a nested tuple of
    them) is length-prefixed, so no two part lists collide by concatenation."""
    if not _KIND.match(kind):
        raise ValueError(f"cache kind must match {_KIND.pattern}, got {kind!r}")
    h = hashlib.sha256()

    def add(p) -> None:
        if isinstance(p, (tuple, list)):
            h.update(b"(%d" % len(p))
            for q in p:
                add(q)
            h.update(b")")
            return
        if isinstance(p, bytes):
            b, tag = p, b"b"
        elif isinstance(p, str):
            b, tag = p.encode(), b"s"
        elif p is None or isinstance(p, (int, bool)):
            b, tag = repr(p).encode(), b"r"
        else:
            raise TypeError(f"cache key parts are str, bytes, int, None or tuples, got {type(p).__name__}")
        h.update(tag + b"%d:" % len(b) + b)
    add(("relaxjax-cache", FORMAT_VERSION, __version__, kind, tuple(key_parts)))
    return h.hexdigest()


def path_for(kind: str, key_parts: Iterable, suffix: str = "") -> Path:
    """Where the entry for ``key_parts`` lives (whether or not it exists)."""
    return cache_dir() / kind / (key(kind, key_parts) + suffix)


def _trailer(data: bytes, digest: bytes) -> bytes:
    return _TRAILER.pack(hashlib.sha256(data).digest(), digest, len(data), __version__.encode()[:16],
                         FORMAT_VERSION, MAGIC)


def _check(blob: bytes, digest: bytes) -> str | None:
    """Why ``blob`` is not a valid entry for ``digest`` (None when it is)."""
    if len(blob) < _TRAILER.size:
        return "truncated"
    sha, kdig, n, version, fmt, magic = _TRAILER.unpack_from(blob, len(blob) - _TRAILER.size)
    if magic != MAGIC:
        return "no trailer (truncated or not a relaxjax cache file)"
    version = version.rstrip(b"\0")
    if fmt != FORMAT_VERSION or version != __version__.encode()[:16]:
        return f"written by another version ({version.decode(errors='replace')}, format {fmt})"
    if kdig != digest:
        return "key mismatch"
    if n != len(blob) - _TRAILER.size:
        return "length mismatch"
    if hashlib.sha256(memoryview(blob)[:n]).digest() != sha:
        return "checksum mismatch"
    return None


# The largest entry read: a file that claims more is not relaxjax's (or is being replaced)
MAX_ENTRY_BYTES = 1 << 30
_WARNED: set = set()          # kinds of bad entries warned about in this process


def _warn_once(what: str, path: Path) -> None:
    if what not in _WARNED:
        _WARNED.add(what)
        log.warning("relaxjax cache: ignoring %s (%s); a regular file will replace it", path, what)


def _read_regular(path: Path) -> bytes | None:
    """The contents of ``path`` if it is a regular file of at most ``MAX_ENTRY_BYTES``, else
    None.  Opened without following a symbolic link and without blocking (a FIFO would
    wait for a writer forever; a link to ``/dev/zero`` would read until memory runs out),
    then checked with ``fstat`` on the open descriptor, so what is read is what was checked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as e:             # ELOOP: a symbolic link; EACCES, ...
        _warn_once(f"not a readable regular file: {e.strerror}", path)
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            _warn_once("not a regular file", path)
            return None
        if st.st_size > MAX_ENTRY_BYTES:
            _warn_once(f"larger than {MAX_ENTRY_BYTES} bytes", path)
            return None
        chunks, left = [], st.st_size + 1        # one byte more: a file that grew is refused
        while left > 0:
            b = os.read(fd, min(left, 1 << 24))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        return None if left <= 0 else b"".join(chunks)
    finally:
        os.close(fd)


def _read(path: Path, digest: bytes) -> bytes | None:
    try:
        blob = _read_regular(path)
    except OSError as e:
        log.debug("cache: cannot read %s: %s", path, e)
        blob = None
    if blob is None:
        _STATS["misses"] += 1
        return None
    why = _check(blob, digest)
    if why is not None:
        log.info("relaxjax cache: ignoring %s (%s); it will be rewritten", path, why)
        _STATS["rejected"] += 1
        return None
    _STATS["hits"] += 1
    return blob


def get(kind: str, key_parts: Iterable, suffix: str = "") -> bytes | None:
    """The payload stored for ``key_parts``, or None (absent, cache off, or invalid)."""
    if not enabled():
        return None
    k = key(kind, key_parts)
    blob = _read(cache_dir() / kind / (k + suffix), bytes.fromhex(k))
    return None if blob is None else blob[:len(blob) - _TRAILER.size]


def get_path(kind: str, key_parts: Iterable, suffix: str = "") -> str | None:
    """The path of a verified entry (its payload starts at offset 0).  None when absent, the
    cache is off, or the entry is invalid.  Not for ``dlopen``: the file may change after
    the check (load a private copy of :func:`get`'s bytes)."""
    if not enabled():
        return None
    k = key(kind, key_parts)
    path = cache_dir() / kind / (k + suffix)
    return None if _read(path, bytes.fromhex(k)) is None else str(path)


def put(kind: str, key_parts: Iterable, data: bytes, suffix: str = "") -> str | None:
    """Store ``data``; returns the entry's path, or None when the cache is off or the
    directory cannot be written (the caller carries on without the cache)."""
    if not enabled():
        return None
    k = key(kind, key_parts)
    d = cache_dir() / kind
    tmp = None
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=d)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.write(_trailer(data, bytes.fromhex(k)))
        os.chmod(tmp, 0o644)
        path = d / (k + suffix)
        os.replace(tmp, path)
    except OSError as e:
        log.warning("relaxjax cache: cannot write to %s: %s", d, e)
        _STATS["write_errors"] += 1
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return None
    _STATS["writes"] += 1
    return str(path)


def _files(root: Path):
    """(kind, path, is_entry) for relaxjax's files under ``root``: entries and temporaries."""
    if not root.is_dir():
        return
    for kd in sorted(root.iterdir()):
        if not kd.is_dir() or not _KIND.match(kd.name):
            continue
        for p in sorted(kd.iterdir()):
            if p.is_file() and (_ENTRY.match(p.name) or p.name.startswith(TMP_PREFIX)):
                yield kd.name, p, not p.name.startswith(TMP_PREFIX)


def info() -> dict:
    """``{"dir", "enabled", "entries", "bytes", "kinds": {kind: {"entries", "bytes"}}}``."""
    root = cache_dir()
    out = {"dir": str(root), "enabled": enabled(), "entries": 0, "bytes": 0, "kinds": {}}
    for kind, p, is_entry in _files(root):
        if not is_entry:
            continue
        try:
            n = p.stat().st_size
        except OSError:
            continue
        k = out["kinds"].setdefault(kind, {"entries": 0, "bytes": 0})
        k["entries"] += 1
        k["bytes"] += n
        out["entries"] += 1
        out["bytes"] += n
    return out


def clear() -> int:
    """Delete every entry (and leftover temporary file); returns the number of entries
    deleted.  Only relaxjax's own files are touched, so a mistaken ``RELAXJAX_CACHE_DIR``
    loses nothing else.  Code already loaded by running processes keeps working."""
    root = cache_dir()
    n = 0
    kinds = set()
    for kind, p, is_entry in list(_files(root)):
        kinds.add(kind)
        try:
            p.unlink()
            n += is_entry
        except FileNotFoundError:
            pass
    for kind in kinds:
        try:
            (root / kind).rmdir()
        except OSError:
            pass
    return n


_SOURCE_DIGEST: list = []


def source_digest() -> str:
    """A sha256 over the path, size and modification time of each of relaxjax's own Python
    sources: part of the key of anything the compiler's Python code decides (lowered
    modules, stored executables), so an edited checkout never reuses what an older one produced, whatever
    ``__version__`` says.  Metadata, not contents, as Python's own bytecode cache does:
    reading every source cost 5 ms of each fresh process's first call, and a file touched
    without a change only costs a cache miss."""
    if not _SOURCE_DIGEST:
        entries = []
        folders = [(str(Path(__file__).resolve().parent), "")]
        while folders:                      # (scandir: no path joins or walk machinery)
            folder, rel = folders.pop()
            with os.scandir(folder) as it:
                for e in it:
                    if e.name.endswith(".py"):
                        st = e.stat()
                        entries.append(f"{rel}/{e.name}\0{st.st_size}\0{st.st_mtime_ns}")
                    elif e.name != "__pycache__" and e.is_dir(follow_symlinks=False):
                        folders.append((e.path, f"{rel}/{e.name}"))
        _SOURCE_DIGEST.append(hashlib.sha256("\n".join(sorted(entries)).encode()).hexdigest())
    return _SOURCE_DIGEST[0]


def stats() -> dict:
    """This process's counters: hits, misses, rejected (invalid files ignored), writes."""
    return dict(_STATS)
