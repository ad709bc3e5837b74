"""Messages and the one codec that turns them into bytes and back, for every backend.

A ``Message`` is a name, named numpy arrays and a JSON-compatible config. The byte format is
deliberately simple (no pickle; nothing in it is ever executed)::

    b"FPGM" | version (1 byte) | header length (8 bytes, little endian) | header JSON (utf-8)
    | zero padding to 64 bytes | each array's raw bytes, each padded to 64 bytes

Bytes from a peer are untrusted: ``decode`` turns every malformed input into a ``CodecError``
(never another exception: JSON that ``json`` cannot take, such as a 4,301-digit integer, a number
overflowing to infinity or deep nesting, and as a last guard anything else that goes wrong
while decoding), bounds the config's nesting, checks each array's dtype, shape and
offset as Python integers, and refuses arrays that overlap, so decoding never uses more memory
than the message itself. NaN and Infinity are refused in configs (``json`` would accept them).

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
from fedpgm.model_files import json_depth, parse_json

MAGIC = b"FPGM"
VERSION = 1
ALIGN = 64
ALLOWED_KINDS = "biufc"  # bool, signed, unsigned, float, complex: never object or void
MAX_DIMS = 32  # as numpy
MAX_BYTES = 2 ** 48  # no single dimension may claim more
MAX_CONFIG_DEPTH = 64


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
    if not isinstance(message.config, dict) or json_depth(message.config, MAX_CONFIG_DEPTH) > MAX_CONFIG_DEPTH:
        raise CodecError(f"config of message '{message.name}' must be a dict nested at most "
                         f"{MAX_CONFIG_DEPTH} levels deep")
    arrays: list[np.ndarray] = []
    entries: list[list] = []  # [key, dtype, shape, offset, nbytes]
    offset = 0
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
                            separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as e:
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
        off, nbytes = int(off), int(nbytes)
        lo = start + off
        buf[lo: lo + nbytes] = arr.reshape(-1).view(np.uint8)
        buf[lo + nbytes: lo + nbytes + pad(nbytes)] = 0  # never send uninitialised memory
    return buf


def is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_entry(entry, body: int, end: int) -> tuple[str, np.dtype, tuple[int, ...], int, int]:
    """One array entry, checked: (key, dtype, shape, offset, nbytes). ``end`` is where the
    previous array's bytes ended: offsets must increase, so no two arrays share bytes."""
    if not isinstance(entry, list) or len(entry) != 5:
        raise CodecError(f"corrupt array entry {str(entry)[:80]} (want [name, dtype, shape, offset, bytes])")
    key, dtype_str, shape, off, nbytes = entry
    if not isinstance(key, str) or not isinstance(dtype_str, str) or not isinstance(shape, list):
        raise CodecError(f"corrupt array entry {str(entry)[:80]} (name, dtype or shape of the wrong type)")
    try:
        dtype = np.dtype(dtype_str)
    except (TypeError, ValueError, SyntaxError):
        raise CodecError(f"array '{key}' declares dtype {dtype_str[:40]!r}, which is not a numpy dtype") from None
    if dtype.kind not in ALLOWED_KINDS or dtype.hasobject or dtype.shape:
        raise CodecError(f"array '{key}' declares dtype {dtype_str[:40]}, which is not allowed")
    if len(shape) > MAX_DIMS or not all(is_int(d) and 0 <= d <= MAX_BYTES for d in shape):
        raise CodecError(f"array '{key}' declares shape {str(shape)[:80]}: want at most {MAX_DIMS} "
                         "non-negative integer sizes")
    if not is_int(off) or not is_int(nbytes) or off % ALIGN or off < end or nbytes < 0:
        raise CodecError(f"array '{key}' declares offset {off!r} / size {nbytes!r}: want aligned, "
                         "increasing integer offsets (no two arrays may share bytes)")
    size = dtype.itemsize
    for d in shape:  # Python integers: no overflow
        size *= d
    if size != nbytes:
        raise CodecError(f"array '{key}' declares shape {tuple(shape)} that does not match {nbytes} bytes")
    if off + nbytes > body:
        raise CodecError(f"array '{key}' lies outside the message (truncated?)")
    return key, dtype, tuple(shape), off, nbytes


def decode(data) -> Message:
    """Bytes-like -> Message; any malformed input raises ``CodecError`` (never executes anything).

    Checked: magic, version, header length, JSON (no NaN/Infinity, nesting at most
    ``MAX_CONFIG_DEPTH``), every array entry (``check_entry``); memory used is at most the
    message's size plus its header, whatever the declared shapes say. Array values are not
    judged here (NaN marks a missing value in query rows); each handler checks what it reads.
    """
    try:
        return decode_checked(data)
    except CodecError:
        raise
    except Exception as e:  # a last guard: bytes from a peer never raise anything but CodecError
        raise CodecError(f"corrupt message ({type(e).__name__}: {str(e)[:200]})") from None


def read_header(view: memoryview) -> tuple[dict, int]:
    """The header JSON, checked for its three keys, and where it ends."""
    head = len(MAGIC) + 9
    if len(view) < head or bytes(view[: len(MAGIC)]) != MAGIC:
        raise CodecError("not a fedpgm message (bad magic bytes)")
    if view[len(MAGIC)] != VERSION:
        raise CodecError(f"message format version {view[len(MAGIC)]} is not supported (want {VERSION})")
    (hlen,) = struct.unpack("<Q", view[len(MAGIC) + 1: head])
    if head + hlen > len(view):
        raise CodecError("truncated message (header longer than the data)")
    try:  # the header nests the config one level deeper
        header = parse_json(bytes(view[head: head + hlen]).decode("utf-8"), MAX_CONFIG_DEPTH + 1)
    except (ValueError, RecursionError, MemoryError) as e:  # UnicodeDecodeError, JSONDecodeError, digits
        raise CodecError(f"corrupt message header ({str(e)[:200]}; at most {MAX_CONFIG_DEPTH} levels of "
                         "nesting and finite numbers)") from None
    if not isinstance(header, dict) or set(header) != {"name", "config", "arrays"}:
        raise CodecError("corrupt message header (want the keys name, config and arrays)")
    return header, head + hlen


def decode_checked(data) -> Message:
    """``decode`` without its last guard."""
    view = memoryview(data).cast("B")
    header, start = read_header(view)
    name, config, entries = header["name"], header["config"], header["arrays"]
    if not isinstance(name, str) or not name or not isinstance(config, dict) or not isinstance(entries, list):
        raise CodecError("corrupt message header (name must be a string, config an object, arrays a list)")
    if json_depth(config, MAX_CONFIG_DEPTH) > MAX_CONFIG_DEPTH:
        raise CodecError(f"config of message '{name[:40]}' is nested deeper than {MAX_CONFIG_DEPTH} levels")
    start += pad(start)
    body = max(0, len(view) - start)
    arrays, end = {}, 0
    for entry in entries:
        key, dtype, shape, off, nbytes = check_entry(entry, body, end)
        if key in arrays:
            raise CodecError(f"array '{key[:40]}' appears twice in message '{name[:40]}'")
        end = off + nbytes
        raw = np.frombuffer(view[start + off: start + end], dtype=np.uint8)
        arrays[key] = raw.copy().view(dtype).reshape(shape)
    return Message(name, arrays, config)
