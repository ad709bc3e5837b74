"""Messages and the one codec that turns them into bytes and back, for every backend.

A ``Message`` is a name, named numpy arrays and a JSON-compatible config. The byte format is
deliberately simple (no pickle; nothing in it is ever executed)::

    b"FPGM" | version (1 byte) | header length (8 bytes, little endian) | header JSON (utf-8)
    | zero padding to 64 bytes | each array's raw bytes, each padded to 64 bytes

The header holds the name, the config and, per array, its name, dtype string (with byte
order, e.g. ``<f8``), shape, offset and byte count, so dtypes and shapes come back exactly.
Encoding is one copy of each array into a preallocated buffer; decoding one copy out.
``encode`` returns a uint8 array (any bytes-like object decodes).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

import numpy as np

from fedpgm.errors import FedpgmError

MAGIC = b"FPGM"
VERSION = 1
ALIGN = 64
ALLOWED_KINDS = "biufc"  # bool, signed, unsigned, float, complex: never object or void


class CodecError(FedpgmError):
    """A message that cannot be encoded, or bytes that are not a valid message."""


@dataclass
class Message:
    """``name``: the handler it is for; ``arrays``: named ndarrays; ``config``: JSON-able dict."""

    name: str
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    config: dict = field(default_factory=dict)

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self.arrays:
            raise KeyError(f"message '{self.name}' has no array '{key}' (it has {sorted(self.arrays)})")
        return self.arrays[key]


def pad(n: int) -> int:
    return (-n) % ALIGN


def encode(message: Message) -> np.ndarray:
    """Message -> bytes, as a 1-D uint8 array (bytes-like; see the module docstring)."""
    if not isinstance(message.name, str) or not message.name:
        raise CodecError("a message needs a non-empty string name")
    arrays, entries, offset = [], [], 0
    for key, value in message.arrays.items():
        if not isinstance(key, str):
            raise CodecError(f"array names must be strings, got {key!r} in '{message.name}'")
        arr = np.asarray(value)
        if not arr.flags.c_contiguous:  # (ascontiguousarray would turn 0-d into 1-d)
            arr = arr.copy(order="C")
        if arr.dtype.kind not in ALLOWED_KINDS:
            raise CodecError(f"array '{key}' of message '{message.name}' has dtype {arr.dtype}; "
                             "only numeric and bool arrays can be sent")
        entries.append([key, arr.dtype.str, list(arr.shape), offset, arr.nbytes])
        arrays.append(arr)
        offset += arr.nbytes + pad(arr.nbytes)
    try:
        header = json.dumps({"name": message.name, "config": message.config, "arrays": entries},
                            separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise CodecError(f"config of message '{message.name}' is not JSON-compatible ({e})") from None
    start = len(MAGIC) + 1 + 8 + len(header)
    start += pad(start)
    buf = np.empty(start + offset, dtype=np.uint8)  # not zero-filled: that would double the cost
    buf[:start] = 0
    buf[: len(MAGIC)] = np.frombuffer(MAGIC, np.uint8)
    buf[len(MAGIC)] = VERSION
    buf[len(MAGIC) + 1: len(MAGIC) + 9] = np.frombuffer(struct.pack("<Q", len(header)), np.uint8)
    buf[len(MAGIC) + 9: len(MAGIC) + 9 + len(header)] = np.frombuffer(header, np.uint8)
    for (_, _, _, off, nbytes), arr in zip(entries, arrays):
        lo = start + off
        buf[lo: lo + nbytes] = arr.reshape(-1).view(np.uint8)
        buf[lo + nbytes: lo + nbytes + pad(nbytes)] = 0  # never send uninitialised memory
    return buf


def decode(data) -> Message:
    """Bytes-like -> Message; any malformed input raises ``CodecError`` (never executes anything)."""
    view = memoryview(data).cast("B")
    head = len(MAGIC) + 9
    if len(view) < head or bytes(view[: len(MAGIC)]) != MAGIC:
        raise CodecError("not a fedpgm message (bad magic bytes)")
    if view[len(MAGIC)] != VERSION:
        raise CodecError(f"message format version {view[len(MAGIC)]} is not supported (want {VERSION})")
    (hlen,) = struct.unpack("<Q", view[len(MAGIC) + 1: head])
    if head + hlen > len(view):
        raise CodecError("truncated message (header longer than the data)")
    try:
        header = json.loads(bytes(view[head: head + hlen]).decode("utf-8"))
        name, config, entries = header["name"], header["config"], header["arrays"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise CodecError(f"corrupt message header ({e})") from None
    start = head + hlen
    start += pad(start)
    arrays = {}
    for entry in entries:
        try:
            key, dtype_str, shape, off, nbytes = entry
            dtype = np.dtype(dtype_str)
            shape = tuple(int(s) for s in shape)
        except (TypeError, ValueError) as e:
            raise CodecError(f"corrupt array entry {entry!r} ({e})") from None
        if dtype.kind not in ALLOWED_KINDS or dtype.hasobject:
            raise CodecError(f"array '{key}' declares dtype {dtype_str}, which is not allowed")
        if any(s < 0 for s in shape) or int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != nbytes:
            raise CodecError(f"array '{key}' declares shape {shape} that does not match {nbytes} bytes")
        if off < 0 or start + off + nbytes > len(view):
            raise CodecError(f"array '{key}' lies outside the message (truncated?)")
        raw = np.frombuffer(view[start + off: start + off + nbytes], dtype=np.uint8)
        arrays[key] = raw.copy().view(dtype).reshape(shape)
    return Message(name, arrays, config)
