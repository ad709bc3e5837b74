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
