"""The serialization cache: a second start loads the plan, the prepared constants and the compiled
programs of each partition instead of computing them.

One file per partition: ``<serialization_dir>/<model_token>_<fingerprint>.bin``. The fingerprint covers the
package version, the backend, its device and driver, the delegate options, and the partition (ops,
attributes, shapes, and the bytes of its constants). With no ``model_token`` the token is a digest of the
model's bytes.

A cache file is code that will run, so nothing in it is trusted: it has a versioned header, a SHA-256
checksum over everything after the magic, and must match this device, driver and package version. The
directory is created 0700 and files 0600; a file that another user owns or that others can write is
refused. Anything that fails a check is ignored with a warning and rewritten. Writes go to a temp file
that is renamed into place, so concurrent starts never see half a file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import struct
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .lowering.plan import KernelCall, Plan, PostOp
from .version import __version__

if TYPE_CHECKING:
    from .graph import Graph

log = logging.getLogger("gpu_delegate")

MAGIC = b"GPUDELEGATE-CACHE\n"
FORMAT_VERSION = 1
_HEAD = struct.Struct("<II")  # format version, header length
STALE_TEMP_S = 3600


def check_token(token: str) -> None:
    if not isinstance(token, str) or not token:
        raise ValueError(f"model_token={token!r} must be a non-empty string")
    if "/" in token or "\\" in token or ".." in token or "\0" in token or token.startswith("."):
        raise ValueError(f"model_token={token!r} must be a plain name: no path separators, '..' or leading '.'")
    if len(token) > 128:
        raise ValueError(f"model_token is {len(token)} characters long; at most 128 are allowed")


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
        if model_token is not None:
            check_token(model_token)
        if serialization_dir is None:
            return None
        directory = Path(serialization_dir)
        if directory.exists() and not directory.is_dir():
            raise ValueError(f"serialization_dir={str(directory)!r} exists and is not a directory")
        if not directory.exists():
            try:
                directory.mkdir(mode=0o700, parents=True)
            except OSError as e:
                log.warning("serialization_dir %s cannot be created (%s): running without the cache", directory, e)
                return None
        return cls(directory, model_token)

    def path(self, fingerprint: str, model_digest: str) -> Path:
        token = self.token or f"model-{model_digest[:16]}"
        return self.directory / f"{token}_{fingerprint}.bin"

    # -- reading -------------------------------------------------------------------------------------------
    def load(self, path: Path, device: str) -> tuple[Plan, dict[str, bytes]] | None:
        """The plan and program binaries stored at ``path``, or None (missing, or refused with a warning)."""
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            self.misses += 1
            return None
        except OSError as e:
            self._reject(path, f"cannot be opened ({e.strerror})")
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if hasattr(os, "getuid") and st.st_uid != os.getuid():
                self._reject(path, f"is owned by user {st.st_uid}, not by this user")
                return None
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                self._reject(path, "is writable by other users")
                return None
            if not stat.S_ISREG(st.st_mode):
                self._reject(path, "is not a regular file")
                return None
            data = f.read()
        try:
            header, payload = _unpack(data)
        except ValueError as e:
            self._reject(path, str(e))
            return None
        if header.get("package") != __version__:
            self._reject(path, f"was written by gpu_delegate {header.get('package')}, this is {__version__}")
            return None
        if header.get("device") != device:
            self._reject(path, "was written for another device or driver")
            return None
        try:
            blobs = {name: payload[off:off + n] for name, off, n in header["blobs"]}
            plan = plan_from_json(header["plan"], blobs)
            binaries = {k[4:]: v for k, v in blobs.items() if k.startswith("bin:")}
        except (KeyError, TypeError, ValueError, IndexError) as e:
            self._reject(path, f"has an unreadable plan ({type(e).__name__}: {e})")
            return None
        self.hits += 1
        return plan, binaries

    def _reject(self, path: Path, why: str) -> None:
        self.rejected += 1
        log.warning("ignoring cache file %s: it %s; it will be rebuilt", path, why)

    # -- writing -------------------------------------------------------------------------------------------
    def store(self, path: Path, device: str, backend: str, plan: Plan, binaries: dict[str, bytes]) -> bool:
        blobs: dict[str, bytes] = {f"const:{k}": np.ascontiguousarray(v, np.float32).tobytes()
                                   for k, v in plan.consts.items()}
        blobs.update({f"bin:{k}": v for k, v in binaries.items()})
        table: list[list[str | int]] = []
        offset = 0
        for name, blob in blobs.items():
            table.append([name, offset, len(blob)])
            offset += len(blob)
        header: dict[str, Any] = {"package": __version__, "device": device, "backend": backend, "token": self.token,
                  "created": time.time(), "plan": plan_to_json(plan), "blobs": table}
        data = _pack(header, b"".join(blobs.values()))
        self._sweep_stale_temps()
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.directory)
        except OSError as e:
            log.warning("cannot write to serialization_dir %s (%s): the cache is not updated", self.directory, e)
            return False
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), 0o600)
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            return True
        except OSError as e:
            log.warning("cannot write cache file %s (%s)", path, e)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False

    def _sweep_stale_temps(self) -> None:
        """Remove temp files that writers killed before their rename left behind. Never loaded, they would
        only pile up; one older than an hour belongs to no live writer (a write takes well under a second)."""
        cutoff = time.time() - STALE_TEMP_S
        for p in self.directory.glob(".tmp-*"):
            try:
                st = p.lstat()
                if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff and (
                        not hasattr(os, "getuid") or st.st_uid == os.getuid()):
                    p.unlink()
            except OSError:
                pass

    # -- listing, for `gpu-delegate cache` -------------------------------------------------------------------
    @staticmethod
    def entries(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
        out = []
        for path in sorted(Path(directory).glob("*.bin")):
            entry: dict[str, Any] = {"file": path.name, "size": path.stat().st_size, "valid": False}
            try:
                header, _ = _unpack(path.read_bytes())
                entry.update(valid=True, token=header.get("token"), backend=header.get("backend"),
                             created=header.get("created"), package=header.get("package"))
            except (OSError, ValueError) as e:
                entry["error"] = str(e)
            out.append(entry)
        return out


def _pack(header: dict[str, Any], payload: bytes) -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    body = _HEAD.pack(FORMAT_VERSION, len(head)) + head + payload
    return MAGIC + body + hashlib.sha256(body).digest()


def _unpack(data: bytes) -> tuple[dict[str, Any], bytes]:
    if not data.startswith(MAGIC):
        raise ValueError("is not a gpu_delegate cache file")
    body, digest = data[len(MAGIC):-32], data[-32:]
    if len(data) < len(MAGIC) + _HEAD.size + 32 or hashlib.sha256(body).digest() != digest:
        raise ValueError("fails its checksum (truncated or corrupted)")
    version, n = _HEAD.unpack_from(body)
    if version != FORMAT_VERSION:
        raise ValueError(f"has format version {version}, this reader knows {FORMAT_VERSION}")
    try:
        header = json.loads(body[_HEAD.size:_HEAD.size + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"has an unreadable header ({e})") from None
    if not isinstance(header, dict):
        raise ValueError("has an unreadable header")
    return header, body[_HEAD.size + n:]


def plan_to_json(plan: Plan) -> dict[str, Any]:
    return {
        "tensors": [[t, list(s)] for t, s in plan.tensors.items()],
        "consts": {k: list(v.shape) for k, v in plan.consts.items()},
        "kernels": [asdict(k) for k in plan.kernels],
        "inputs": plan.inputs, "outputs": plan.outputs,
        "aliases": [[a, b] for a, b in plan.aliases.items()],
        "buffer_of": [[a, b] for a, b in plan.buffer_of.items()],
        "buffer_sizes": plan.buffer_sizes, "nodes": plan.nodes, "notes": plan.notes, "tuned": plan.tuned,
        "fp32_tensors": sorted(plan.fp32_tensors), "fp32_consts": sorted(plan.fp32_consts),
        "buffer_fp32": plan.buffer_fp32, "state_updates": [[a, b] for a, b in plan.state_updates.items()],
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
        kernels.append(KernelCall(**k))
    return Plan(tensors={int(t): tuple(s) for t, s in d["tensors"]}, consts=consts, kernels=kernels,
                inputs=list(d["inputs"]), outputs=list(d["outputs"]), aliases={int(a): int(b) for a, b in d["aliases"]},
                buffer_of={int(a): int(b) for a, b in d["buffer_of"]}, buffer_sizes=list(d["buffer_sizes"]),
                nodes=list(d["nodes"]), notes=list(d["notes"]), tuned=bool(d["tuned"]),
                fp32_tensors={int(t) for t in d["fp32_tensors"]}, fp32_consts=set(d["fp32_consts"]),
                buffer_fp32=[bool(f) for f in d["buffer_fp32"]],
                state_updates={int(a): int(b) for a, b in d["state_updates"]})


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
