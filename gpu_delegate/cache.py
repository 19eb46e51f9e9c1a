"""The serialization cache: a second start loads the plan, the prepared constants and the compiled
programs of each partition instead of computing them.

One file per partition: ``<serialization_dir>/<model_token>_<fingerprint>.bin``. The fingerprint covers the
package version, the backend, its device and driver, the delegate options, and the partition (ops,
attributes, shapes, and the bytes of its constants). With no ``model_token`` the token is a digest of the
model's bytes.

A cache file is code that will run, so nothing in it is trusted that this user did not write:
- the directory only when this user owns it and neither group nor others may write to it (as ssh treats
  ~/.ssh); otherwise the delegate warns and runs without the cache. It is created 0700, files 0600.
- a file only when it is a regular file (opened without following a link or blocking on a FIFO) owned by
  this user and not writable by group or others, its SHA-256 checksum (over everything after the magic)
  holds, and its header names the token, fingerprint, model digest, device and package version this start
  expects: a file renamed or copied under another name is refused, not run as the wrong model.
Anything that fails a check is ignored with a warning and rewritten. Every operation opens the directory
once and works relative to that handle, so swapping the path for another directory in between changes
nothing. Writes go to a temp file that is renamed into place, so concurrent starts never see half a file.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import secrets
import stat
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .lowering.plan import KernelCall, Plan, PostOp
from .version import build_id

if TYPE_CHECKING:
    from .graph import Graph

log = logging.getLogger("gpu_delegate")

MAGIC = b"GPUDELEGATE-CACHE\n"
FORMAT_VERSION = 2  # 2: the header names the token, fingerprint and model digest the file was written for
_HEAD = struct.Struct("<II")  # format version, header length
STALE_TEMP_S = 3600
TEMP_PREFIX = ".tmp-"
SUFFIX = ".bin"
# A token's bytes in UTF-8 at most: with "_", a 24-digit fingerprint and ".bin" a name stays far below the
# 255 bytes file systems allow.
MAX_TOKEN_BYTES = 128
# Open a cache file without following a symbolic link, without blocking on a FIFO (open would wait for a
# writer forever) and without handing the descriptor to a child process.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def check_token(token: object) -> None:
    """ValueError naming model_token unless it is a plain, printable file name part of at most
    MAX_TOKEN_BYTES bytes in UTF-8."""
    if not isinstance(token, str) or not token:
        raise ValueError(f"model_token={token!r} must be a non-empty string")
    if "/" in token or "\\" in token or ".." in token or token.startswith("."):
        raise ValueError(f"model_token={token!r} must be a plain name: no path separators, '..' or leading '.'")
    if not token.isprintable():  # control and format characters, and lone surrogates, which UTF-8 cannot write
        raise ValueError(f"model_token={token!r} has a character that is not printable")
    size = len(token.encode("utf-8"))
    if size > MAX_TOKEN_BYTES:
        raise ValueError(f"model_token is {size} bytes long in UTF-8 ({len(token)} characters); at most "
                         f"{MAX_TOKEN_BYTES} bytes are allowed")


def check_directory(serialization_dir: object) -> Path:
    """``serialization_dir`` as a Path; ValueError/TypeError naming it when it cannot name a directory."""
    if not isinstance(serialization_dir, (str, os.PathLike)):
        raise TypeError(f"serialization_dir must be a str or os.PathLike, not {type(serialization_dir).__name__}")
    text = os.fspath(serialization_dir)
    if not isinstance(text, str):
        raise TypeError(f"serialization_dir must be a str or os.PathLike of str, not of {type(text).__name__}")
    if not text:
        # Path("") is the current directory: an empty option would silently cache there
        raise ValueError("serialization_dir='' is empty: give a directory, or None for no cache")
    if "\0" in text:
        raise ValueError(f"serialization_dir={text!r} contains a NUL character")
    return Path(text)


def distrust(st: os.stat_result) -> str | None:
    """Why a directory or file with status ``st`` cannot be trusted with code that will run, or None: another
    user owns it, or its group or others may write to it (sticky or not: a file in it could be replaced)."""
    if st.st_uid != os.getuid():
        return f"is owned by user {st.st_uid}, not by this user ({os.getuid()})"
    writers = [who for who, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit]
    if writers:
        return f"is writable by {' and '.join(writers)} (mode {stat.S_IMODE(st.st_mode):o})"
    return None


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISLNK, "a symbolic link"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


@dataclass(frozen=True)
class Entry:
    """One cache file as this start expects it: its name and what its header must say."""

    token: str
    fingerprint: str
    model_digest: str

    @property
    def name(self) -> str:
        return f"{self.token}_{self.fingerprint}{SUFFIX}"


class UntrustedFile(ValueError):
    """A cache file refused before its contents are read (what it is, who owns it, who may write it)."""


class _Untrusted(Exception):
    """The serialization directory failed its check (already reported with a warning)."""


def _open_regular(name: str, dir_fd: int) -> tuple[int, os.stat_result]:
    """A descriptor of regular file ``name`` in ``dir_fd`` and its status, opened without following a link or
    blocking; FileNotFoundError if there is none, UntrustedFile for anything else there."""
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UntrustedFile("is a symbolic link") from None
        raise UntrustedFile(f"cannot be opened ({e.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UntrustedFile(f"is {_kind(st.st_mode)}, not a regular file")
    return fd, st


@contextmanager
def _directory(path: Path) -> Iterator[int]:
    """A descriptor of directory ``path``; OSError if there is none."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


class Cache:
    """One serialization directory, as one delegate uses it."""

    def __init__(self, directory: Path, token: str | None) -> None:
        self.directory = directory
        self.token = token
        self.hits = 0
        self.misses = 0
        self.rejected = 0

    @classmethod
    def open(cls, serialization_dir: str | os.PathLike[str] | None, model_token: str | None) -> Cache | None:
        """The cache in ``serialization_dir`` (created 0700 if missing), or None: no directory given, or one
        that cannot be created or is not trusted (a warning says why; the delegate runs without a cache)."""
        if model_token is not None:
            check_token(model_token)
        if serialization_dir is None:
            return None
        directory = check_directory(serialization_dir)
        if directory.exists() and not directory.is_dir():
            raise ValueError(f"serialization_dir={str(directory)!r} exists and is not a directory")
        if not directory.exists():
            try:
                directory.mkdir(mode=0o700, parents=True)
            except OSError as e:
                log.warning("serialization_dir %s cannot be created (%s): running without the cache", directory, e)
                return None
        cache = cls(directory, model_token)
        try:
            with cache._trusted():
                return cache
        except _Untrusted:
            return None

    @contextmanager
    def _trusted(self) -> Iterator[int]:
        """A descriptor of the directory, while it is one this user owns and nobody else can write to; else a
        warning and _Untrusted. Files are opened relative to it: replacing the path meanwhile changes nothing."""
        try:
            fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            log.warning("serialization_dir %s cannot be opened (%s): running without the cache", self.directory, e)
            raise _Untrusted from None
        try:
            why = distrust(os.fstat(fd))
            if why is not None:
                log.warning("serialization_dir %s is not trusted: it %s, so another user could change the programs "
                            "this delegate runs; running without the cache (as ssh does: make the directory yours "
                            "and `chmod go-w` it, or choose another)", self.directory, why)
                raise _Untrusted
            yield fd
        finally:
            os.close(fd)

    def entry(self, fingerprint: str, model_digest: str) -> Entry:
        """The file of a partition with ``fingerprint`` in the model with SHA-256 ``model_digest``."""
        return Entry(self.token or f"model-{model_digest[:16]}", fingerprint, model_digest)

    def path(self, entry: Entry) -> Path:
        return self.directory / entry.name

    # -- reading -------------------------------------------------------------------------------------------
    def load(self, entry: Entry, device: str) -> tuple[Plan, dict[str, bytes]] | None:
        """The plan and program binaries of ``entry``, or None (missing, or refused with a warning)."""
        try:
            with self._trusted() as dir_fd:
                try:
                    fd, st = _open_regular(entry.name, dir_fd)
                except FileNotFoundError:
                    self.misses += 1
                    return None
        except _Untrusted:
            self.rejected += 1
            return None
        except UntrustedFile as e:
            self._reject(entry, str(e))
            return None
        with os.fdopen(fd, "rb") as f:
            why = distrust(st)
            if why is not None:
                self._reject(entry, why)
                return None
            data = f.read()
        try:
            header, payload = _unpack(data)
        except ValueError as e:
            self._reject(entry, str(e))
            return None
        if header.get("package") != build_id():
            self._reject(entry, f"was written by gpu_delegate {header.get('package')}, this is {build_id()}")
            return None
        if header.get("device") != device:
            self._reject(entry, "was written for another device or driver")
            return None
        for field, expected in (("token", entry.token), ("fingerprint", entry.fingerprint),
                                ("model", entry.model_digest)):
            if header.get(field) != expected:
                self._reject(entry, f"names {field} {header.get(field)!r}, not the {expected!r} this start expects "
                                    "(a cache file renamed or copied from another model or partition)")
                return None
        try:
            blobs = {name: payload[off:off + n] for name, off, n in header["blobs"]}
            plan = plan_from_json(header["plan"], blobs)
            binaries = {k[4:]: v for k, v in blobs.items() if k.startswith("bin:")}
        except (KeyError, TypeError, ValueError, IndexError) as e:
            self._reject(entry, f"has an unreadable plan ({type(e).__name__}: {e})")
            return None
        self.hits += 1
        return plan, binaries

    def _reject(self, entry: Entry, why: str) -> None:
        self.rejected += 1
        log.warning("ignoring cache file %s: it %s; it will be rebuilt", self.path(entry), why)

    # -- writing -------------------------------------------------------------------------------------------
    def store(self, entry: Entry, device: str, backend: str, plan: Plan, binaries: dict[str, bytes]) -> bool:
        blobs: dict[str, bytes] = {f"const:{k}": np.ascontiguousarray(v, np.float32).tobytes()
                                   for k, v in plan.consts.items()}
        blobs.update({f"bin:{k}": v for k, v in binaries.items()})
        table: list[list[str | int]] = []
        offset = 0
        for name, blob in blobs.items():
            table.append([name, offset, len(blob)])
            offset += len(blob)
        header: dict[str, Any] = {
            "package": build_id(), "device": device, "backend": backend, "token": entry.token,
            "fingerprint": entry.fingerprint, "model": entry.model_digest, "created": time.time(),
            "plan": plan_to_json(plan), "blobs": table}
        data = _pack(header, b"".join(blobs.values()))
        try:
            with self._trusted() as dir_fd:
                return self._write(dir_fd, entry, data)
        except _Untrusted:
            return False

    def takes_files(self) -> bool:
        """Whether a file can be written here now: tried, not inferred from permission bits (root writes through
        them, and a read-only mount refuses everyone). A start that cannot keep its work need not do extra."""
        try:
            with self._trusted() as dir_fd:
                fd, tmp = self._create_temp(dir_fd)
                os.close(fd)
                os.unlink(tmp, dir_fd=dir_fd)
                return True
        except (_Untrusted, OSError):
            return False

    @staticmethod
    def _create_temp(dir_fd: int) -> tuple[int, str]:
        """A new private temp file in the directory: its descriptor and name."""
        tmp = f"{TEMP_PREFIX}{secrets.token_hex(8)}"
        return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                       dir_fd=dir_fd), tmp

    def _write(self, dir_fd: int, entry: Entry, data: bytes) -> bool:
        self._sweep_stale_temps(dir_fd)
        try:
            fd, tmp = self._create_temp(dir_fd)
        except OSError as e:
            log.warning("cannot write to serialization_dir %s (%s): the cache is not updated", self.directory, e)
            return False
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, entry.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return True
        except OSError as e:
            log.warning("cannot write cache file %s (%s)", self.path(entry), e)
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            return False

    @staticmethod
    def _sweep_stale_temps(dir_fd: int) -> None:
        """Remove temp files that writers killed before their rename left behind. Never loaded, they would
        only pile up; one older than an hour belongs to no live writer (a write takes well under a second)."""
        cutoff = time.time() - STALE_TEMP_S
        for name in os.listdir(dir_fd):
            if not name.startswith(TEMP_PREFIX):
                continue
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff and st.st_uid == os.getuid():
                    os.unlink(name, dir_fd=dir_fd)
            except OSError:
                pass

    # -- listing and clearing, for `gpu-delegate cache` --------------------------------------------------------
    @staticmethod
    def entries(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
        """Every ``*.bin`` in ``directory``: file, size, ours (a regular file of this user whose header is a
        gpu_delegate cache header: what `cache clear` removes), valid (ours, and its checksum holds), the
        header's token, backend, created and package, and why it is not ours or not valid (error)."""
        with _directory(Path(directory)) as dir_fd:
            return [_describe(name, dir_fd) for name in sorted(os.listdir(dir_fd)) if name.endswith(SUFFIX)]

    @staticmethod
    def clear(directory: str | os.PathLike[str]) -> tuple[list[str], list[dict[str, Any]]]:
        """Remove the cache files of ``directory`` whose header is ours (valid or damaged) and the temp files
        our writers left; returns (names removed, entries of the ``*.bin`` files left, with why)."""
        removed: list[str] = []
        kept: list[dict[str, Any]] = []
        with _directory(Path(directory)) as dir_fd:
            for name in sorted(os.listdir(dir_fd)):
                if not (name.endswith(SUFFIX) or name.startswith(TEMP_PREFIX)):
                    continue
                entry = _describe(name, dir_fd)
                if not entry["ours"]:
                    if name.endswith(SUFFIX):
                        kept.append(entry)
                    continue
                try:
                    os.unlink(name, dir_fd=dir_fd)
                    removed.append(name)
                except FileNotFoundError:
                    pass  # another clear, or a writer's rename, got there first
        return removed, kept


def _describe(name: str, dir_fd: int) -> dict[str, Any]:
    """What `cache ls` says of file ``name``; "ours": a regular file of this user that starts with a gpu_delegate
    cache header (of any format version, valid or not): what `cache clear` may remove."""
    entry: dict[str, Any] = {"file": name, "size": 0, "ours": False, "valid": False}
    try:
        fd, st = _open_regular(name, dir_fd)
    except FileNotFoundError:
        entry["error"] = "is gone"
        return entry
    except UntrustedFile as e:
        try:
            entry["size"] = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size
        except OSError:
            pass
        entry["error"] = str(e)
        return entry
    with os.fdopen(fd, "rb") as f:
        entry["size"] = st.st_size
        if st.st_uid != os.getuid():
            entry["error"] = distrust(st)
            return entry
        if f.read(len(MAGIC)) != MAGIC:
            entry["error"] = "is not a gpu_delegate cache file"
            return entry
        data = MAGIC + f.read()
    try:
        _, header = _read_header(data)
    except ValueError as e:
        entry["error"] = str(e)
        return entry
    entry.update(ours=True, token=header.get("token"), backend=header.get("backend"), created=header.get("created"),
                 package=header.get("package"))
    try:
        _unpack(data)
    except ValueError as e:
        entry["error"] = str(e)
        return entry
    why = distrust(st)
    if why is not None:
        entry["error"] = why
        return entry
    entry["valid"] = True
    return entry


def _pack(header: dict[str, Any], payload: bytes) -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    body = _HEAD.pack(FORMAT_VERSION, len(head)) + head + payload
    return MAGIC + body + hashlib.sha256(body).digest()


def _read_header(data: bytes) -> tuple[int, dict[str, Any]]:
    """The format version and the JSON header of a cache file, read without checking either or the checksum: to
    tell a damaged or older file of ours from a foreign one."""
    if not data.startswith(MAGIC):
        raise ValueError("is not a gpu_delegate cache file")
    body = data[len(MAGIC):]
    if len(body) < _HEAD.size:
        raise ValueError("fails its checksum (truncated or corrupted)")
    version, n = _HEAD.unpack_from(body)
    try:
        header = json.loads(body[_HEAD.size:_HEAD.size + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"has an unreadable header ({e})") from None
    if not isinstance(header, dict):
        raise ValueError("has an unreadable header")
    return version, header


def _unpack(data: bytes) -> tuple[dict[str, Any], bytes]:
    """The header and the payload of a cache file whose checksum holds and whose format this reader knows."""
    if not data.startswith(MAGIC):
        raise ValueError("is not a gpu_delegate cache file")
    body, digest = data[len(MAGIC):-32], data[-32:]
    if len(data) < len(MAGIC) + _HEAD.size + 32 or hashlib.sha256(body).digest() != digest:
        raise ValueError("fails its checksum (truncated or corrupted)")
    version, header = _read_header(data)
    if version != FORMAT_VERSION:
        raise ValueError(f"has format version {version}, this reader knows {FORMAT_VERSION}")
    _, n = _HEAD.unpack_from(body)
    return header, body[_HEAD.size + n:]


def plan_to_json(plan: Plan) -> dict[str, Any]:
    return {
        "tensors": [[t, list(s)] for t, s in plan.tensors.items()],
        "consts": {k: list(v.shape) for k, v in plan.consts.items()},
        "kernels": [asdict(k) for k in plan.kernels],
        "inputs": plan.inputs, "outputs": plan.outputs,
        "aliases": [[a, b] for a, b in plan.aliases.items()],
        "placed": [[a, b, first] for a, (b, first) in plan.placed.items()],
        "buffer_of": [[a, b] for a, b in plan.buffer_of.items()],
        "buffer_sizes": plan.buffer_sizes, "nodes": plan.nodes, "notes": plan.notes, "tuned": plan.tuned,
        "fp32_tensors": sorted(plan.fp32_tensors), "fp32_consts": sorted(plan.fp32_consts),
        "half_consts": sorted(plan.half_consts),
        "buffer_fp32": plan.buffer_fp32, "state_updates": [[a, b] for a, b in plan.state_updates.items()],
        "dense": sorted(plan.dense), "dense_copies": [[a, b] for a, b in plan.dense_copies.items()],
    }


def plan_from_json(d: dict[str, Any], blobs: dict[str, bytes]) -> Plan:
    consts: dict[str, np.ndarray] = {}
    for key, shape in d["consts"].items():
        arr = np.frombuffer(blobs[f"const:{key}"], np.float32)
        consts[key] = arr.reshape(shape)
    kernels = []
    for k in d["kernels"]:
        k = dict(k)
        k["postops"] = [PostOp(**p) for p in k["postops"]]
        k["grid"] = tuple(k["grid"])
        k["local_size"] = tuple(k["local_size"]) if k["local_size"] is not None else None
        k["fused_nodes"] = tuple(k.get("fused_nodes", ()))
        k["constants"] = tuple(k.get("constants", ()))
        kernels.append(KernelCall(**k))
    return Plan(tensors={int(t): tuple(s) for t, s in d["tensors"]}, consts=consts, kernels=kernels,
                inputs=list(d["inputs"]), outputs=list(d["outputs"]), aliases={int(a): int(b) for a, b in d["aliases"]},
                placed={int(a): (int(b), int(first)) for a, b, first in d.get("placed", [])},
                buffer_of={int(a): int(b) for a, b in d["buffer_of"]}, buffer_sizes=list(d["buffer_sizes"]),
                nodes=list(d["nodes"]), notes=list(d["notes"]), tuned=bool(d["tuned"]),
                fp32_tensors={int(t) for t in d["fp32_tensors"]}, fp32_consts=set(d["fp32_consts"]),
                half_consts=set(d.get("half_consts", [])),
                buffer_fp32=[bool(f) for f in d["buffer_fp32"]],
                state_updates={int(a): int(b) for a, b in d["state_updates"]},
                dense={int(t) for t in d.get("dense", [])},
                dense_copies={int(a): int(b) for a, b in d.get("dense_copies", [])})


def fingerprint(parts: list[Any]) -> str:
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, np.ndarray):
            h.update(np.ascontiguousarray(p).view(np.uint8).tobytes() if p.size else b"")
        else:
            h.update(json.dumps(p, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def partition_parts(graph: Graph, nodes: list[int], shapes: dict[int, tuple[int, ...]]) -> list[Any]:
    """What identifies a partition: its nodes with their attributes, its tensors' shapes, types and
    quantization, and the bytes of its constants."""
    parts: list[Any] = []
    seen: set[int] = set()
    for n in nodes:
        node = graph.nodes[n]
        parts.append([node.op, node.version, node.inputs, node.outputs, node.attrs, node.custom_options.hex()])
        for t in (*node.inputs, *node.outputs):
            if t < 0 or t in seen:
                continue
            seen.add(t)
            tensor = graph.tensors[t]
            q = tensor.quant
            parts.append([t, list(shapes.get(t, tensor.shape)), str(tensor.dtype),
                          None if q is None else [q.scale.tolist(), q.zero_point.tolist(), q.axis]])
            if tensor.data is not None:
                parts.append(np.asarray(tensor.data))
    return parts
