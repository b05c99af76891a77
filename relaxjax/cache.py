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
a magic number).  The payload starts at offset 0, so a shared library can be ``dlopen``ed
in place (:func:`get_path`); the trailer is past the end of what the ELF headers describe.
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
_TMP_PREFIX = ".tmp-"

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


def _read(path: Path, digest: bytes) -> bytes | None:
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        _STATS["misses"] += 1
        return None
    except OSError as e:
        log.debug("cache: cannot read %s: %s", path, e)
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
    """The path of a verified entry, for loaders that need a file (``dlopen``): its payload
    starts at offset 0.  None when absent, the cache is off, or the entry is invalid."""
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
        fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=d)
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
            if p.is_file() and (_ENTRY.match(p.name) or p.name.startswith(_TMP_PREFIX)):
                yield kd.name, p, not p.name.startswith(_TMP_PREFIX)


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
    modules), so an edited checkout never reuses what an older one produced, whatever
    ``__version__`` says.  Metadata, not contents, as Python's own bytecode cache does:
    reading every source cost 5 ms of each fresh process's first call, and a file touched
    without a change only costs a cache miss."""
    if not _SOURCE_DIGEST:
        root = str(Path(__file__).resolve().parent)
        h = hashlib.sha256()
        entries = []
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for n in names:
                if n.endswith(".py"):
                    st = os.stat(os.path.join(folder, n))
                    entries.append(f"{folder[len(root):]}/{n}\0{st.st_size}\0{st.st_mtime_ns}")
        h.update("\n".join(sorted(entries)).encode())
        _SOURCE_DIGEST.append(h.hexdigest())
    return _SOURCE_DIGEST[0]


def stats() -> dict:
    """This process's counters: hits, misses, rejected (invalid files ignored), writes."""
    return dict(_STATS)
