"""The zmsg frame-packing codec."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generaldomo.errors import CodecError
from generaldomo.sansio.wire.codec import decode, encode

frames = st.lists(st.binary(max_size=600), max_size=12)


@given(frames)
def test_round_trip(message: list[bytes]) -> None:
    assert decode(encode(message)) == message


@pytest.mark.parametrize("size", [0, 1, 254, 255, 256, 65_535, 65_536, 70_000, 1 << 20])
def test_round_trip_at_length_boundaries(size: int) -> None:
    message = [b"", b"x" * size, b"", bytes(range(256)) * 2]
    assert decode(encode(message)) == message


@pytest.mark.parametrize(
    ("size", "prefix"), [(0, b"\x00"), (254, b"\xfe"), (255, b"\xff\x00\x00\x00\xff"), (256, b"\xff\x00\x00\x01\x00")]
)
def test_length_prefix_layout(size: int, prefix: bytes) -> None:
    assert encode([b"a" * size]) == prefix + b"a" * size


def test_empty_frames_survive() -> None:
    assert decode(encode([b"", b"", b""])) == [b"", b"", b""]
    assert encode([]) == b"" and decode(b"") == []


@given(frames, st.data())
def test_truncation_is_an_error_never_a_wrong_answer(message: list[bytes], data: st.DataObject) -> None:
    packed = encode(message)
    if not packed:
        return
    cut = data.draw(st.integers(min_value=0, max_value=len(packed) - 1))
    try:
        decoded = decode(packed[:cut])
    except CodecError:
        return
    assert decoded == message[: len(decoded)]  # a cut exactly between frames decodes to a prefix


@given(st.binary(max_size=300))
def test_garbage_raises_codec_error_or_decodes(data: bytes) -> None:
    try:
        decoded = decode(data)
    except CodecError:
        return
    assert decode(encode(decoded)) == decoded
