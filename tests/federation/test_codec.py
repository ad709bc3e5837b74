import numpy as np
import pytest

from fedpgm.federation.codec import CodecError, Message, decode, encode


def test_round_trip_preserves_dtypes_shapes_and_values():
    arrays = {
        "f64": np.random.default_rng(0).normal(size=(3, 4)),
        "f32": np.arange(5, dtype=np.float32),
        "big_endian": np.arange(6, dtype=">i4").reshape(2, 3),
        "u8": np.array([[1, 2], [3, 255]], dtype=np.uint8),
        "bool": np.array([True, False, True]),
        "c128": np.array([1 + 2j]),
        "empty": np.zeros((0, 7)),
        "scalar": np.array(3.5),
        "strided": np.arange(20.0).reshape(4, 5)[:, ::2],
    }
    msg = Message("fit", arrays, {"k": 3, "names": ["a", "b"], "nested": {"x": 1.5, "n": None}})
    back = decode(encode(msg))
    assert back.name == "fit" and back.config == msg.config
    for key, value in arrays.items():
        assert back[key].dtype == value.dtype and back[key].shape == value.shape
        np.testing.assert_array_equal(back[key], value)
        assert back[key].flags.writeable and not np.shares_memory(back[key], value)


def test_encoded_size_is_payload_plus_small_header():
    x = np.zeros(1_000_000)
    data = encode(Message("m", {"x": x}))
    assert x.nbytes < len(data) < x.nbytes + 512


@pytest.mark.parametrize("message, text", [
    (Message("m", {"o": np.array([object()])}), "only numeric and bool arrays"),
    (Message("m", {"s": np.array(["text"])}), "only numeric and bool arrays"),
    (Message("m", {}, {"f": object()}), "not JSON-compatible"),
    (Message("", {}), "non-empty string name"),
])
def test_encode_rejects(message, text):
    with pytest.raises(CodecError, match=text):
        encode(message)


def test_decode_rejects_corrupt_bytes_without_executing_anything():
    good = bytes(encode(Message("m", {"x": np.arange(10.0)})))
    with pytest.raises(CodecError, match="bad magic"):
        decode(b"\x80\x04\x95pickle")
    with pytest.raises(CodecError, match="truncated"):
        decode(good[:-64])  # (the last 48 bytes are padding)
    with pytest.raises(CodecError, match="truncated|corrupt"):
        decode(good[:20])
    with pytest.raises(CodecError, match="version"):
        decode(good[:4] + b"\x09" + good[5:])
    forged = good.replace(b'"<f8"', b'"|O8"')
    with pytest.raises(CodecError, match="not allowed"):
        decode(forged)
    lying = good.replace(b"[10]", b"[11]")
    with pytest.raises(CodecError, match="does not match"):
        decode(lying)


# -- hostile bytes: every malformed message is a CodecError, and decoding stays in bounded memory

def craft(header, body: bytes = b"", version: int = 1, hlen: int | None = None) -> bytes:
    """A message with ``header`` (a dict, or raw bytes) as its header and ``body`` after it."""
    import json
    import struct

    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    start = 13 + len(raw)
    return (b"FPGM" + bytes([version]) + struct.pack("<Q", len(raw) if hlen is None else hlen) + raw
            + b"\0" * ((-start) % 64) + body)


def entry(key="x", dtype="<f8", shape=(4,), off=0, nbytes=32):
    return [key, dtype, list(shape) if isinstance(shape, tuple) else shape, off, nbytes]


def header(arrays=(), name="m", config=None, **extra):
    return {"name": name, "config": {} if config is None else config, "arrays": list(arrays), **extra}


BODY = b"\0" * 64
DEEP = b'{"name":"m","config":' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b',"arrays":[]}'
NESTED_65 = {"a": 1}
for _ in range(64):
    NESTED_65 = {"a": NESTED_65}
HOSTILE = {
    "empty": b"",
    "bad magic": b"GPMF" + bytes(60),
    "pickle": b"\x80\x04\x95" + bytes(40),
    "short": b"FPGM\x01",
    "version 0": craft(header(), version=0),
    "version 255": craft(header(), version=255),
    "header length 2**63": craft(header(), hlen=2 ** 63),
    "header longer than data": craft(header(), hlen=10_000),
    "header not utf-8": craft(b"\xff\xfe{}"),
    "header not json": craft(b"{name: m}"),
    "header a list": craft(b"[1, 2]"),
    "header missing keys": craft({"name": "m"}),
    "header extra key": craft(header(evil=1)),
    "name not a string": craft(header(name=5)),
    "empty name": craft(header(name="")),
    "config a list": craft(header(config=[1, 2])),
    "config nested 100k deep": craft(DEEP),
    "config nested 65 deep": craft(header(config=NESTED_65)),
    "NaN in config": craft(b'{"name":"m","config":{"x":NaN},"arrays":[]}'),
    "Infinity in config": craft(b'{"name":"m","config":{"x":-Infinity},"arrays":[]}'),
    "4301-digit integer in config": craft(b'{"name":"m","config":{"x":' + b"7" * 4301 + b'},"arrays":[]}'),
    "4301-digit shape": craft(b'{"name":"m","config":{},"arrays":[["x","<f8",[' + b"9" * 4301 + b'],0,32]]}', BODY),
    "1e999 in config": craft(b'{"name":"m","config":{"x":1e999},"arrays":[]}'),
    "lone surrogate name": craft(b'{"name":"\\ud800","config":{},"arrays":[["\\udfff","|V8",[1],0,8]]}', BODY),
    "arrays not a list": craft(header() | {"arrays": {"x": 1}}),
    "entry not a list": craft(header([{"key": "x"}])),
    "entry of 4 items": craft(header([["x", "<f8", [4], 0]]), BODY),
    "key not a string": craft(header([entry(key=7)]), BODY),
    "object dtype": craft(header([entry(dtype="|O")]), BODY),
    "void dtype": craft(header([entry(dtype="|V8")]), BODY),
    "structured dtype": craft(header([entry(dtype="<f8,<i4")]), BODY),
    "garbage dtype": craft(header([entry(dtype="zz9")]), BODY),
    "subarray dtype": craft(header([entry(dtype="(2,)<f8", nbytes=64)]), BODY),
    "shape not a list": craft(header([entry(shape="4")]), BODY),
    "shape [2**62, 4]": craft(header([entry(shape=[2 ** 62, 4], nbytes=2 ** 67)]), BODY),
    "shape [2**70]": craft(header([entry(shape=[2 ** 70], nbytes=2 ** 73)]), BODY),
    "negative shape": craft(header([entry(shape=[-4], nbytes=-32)]), BODY),
    "float shape": craft(header([entry(shape=[4.0])]), BODY),
    "bool shape": craft(header([entry(shape=[True], nbytes=8)]), BODY),
    "33 dimensions": craft(header([entry(shape=[1] * 33, nbytes=8)]), BODY),
    "float offset": craft(header([entry(off=0.0)]), BODY),
    "negative offset": craft(header([entry(off=-64)]), BODY),
    "unaligned offset": craft(header([entry(off=8)]), BODY + BODY),
    "offset beyond the body": craft(header([entry(off=640)]), BODY),
    "bytes do not match the shape": craft(header([entry(nbytes=24)]), BODY),
    "800 entries aliasing one body": craft(header([entry(f"x{i}", shape=(131072,), nbytes=2 ** 20)
                                                   for i in range(800)]), bytes(2 ** 20)),
    "overlapping arrays": craft(header([entry("a", shape=(16,), nbytes=128), entry("b", off=64)]), BODY * 2),
    "duplicate array name": craft(header([entry("a"), entry("a", off=64)]), BODY * 2),
    "truncated body": craft(header([entry(shape=(64,), nbytes=512)]), BODY),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_bytes_are_a_codec_error_in_bounded_memory(case):
    import tracemalloc

    data = HOSTILE[case]
    tracemalloc.start()
    try:
        with pytest.raises(CodecError):
            decode(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(data) + 2 ** 20, f"{case}: decoding took {peak} bytes for {len(data)}"


def test_hostile_set_has_the_issues_40_cases_and_the_good_message_still_decodes():
    assert len(HOSTILE) >= 44
    good = craft(header([entry("a", shape=(8,), nbytes=64), entry("b", off=64)]), BODY * 2)
    msg = decode(good)
    assert msg.arrays["a"].shape == (8,) and msg.arrays["b"].shape == (4,)


def test_encode_refuses_nan_in_config_and_too_deep_configs():
    with pytest.raises(CodecError, match="JSON-compatible"):
        encode(Message("m", {}, {"x": float("nan")}))
    with pytest.raises(CodecError, match="nested at most"):
        encode(Message("m", {}, NESTED_65))
    deepest_allowed = NESTED_65["a"]["a"]
    assert decode(encode(Message("m", {}, deepest_allowed))).config == deepest_allowed


def test_nothing_but_codec_error_escapes_decode(monkeypatch):
    """Whatever fails inside (a non-buffer; an exception no check foresaw), the caller sees a
    ``CodecError``: ``Federation.broadcast`` catches only that."""
    import fedpgm.federation.codec as codec

    def surprise(*args):
        raise RuntimeError("surprise")

    with pytest.raises(CodecError):
        decode(object())
    good = encode(Message("m", {"x": np.arange(3.0)}))
    monkeypatch.setattr(codec, "check_entry", surprise)
    with pytest.raises(CodecError, match=r"corrupt message \(RuntimeError: surprise\)"):
        decode(good)
