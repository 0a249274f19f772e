"""Image encodings: pil/png lossless round trips, jpeg, list[...] and jpeg_array layouts, errors."""

from __future__ import annotations

import builtins
import io
import struct
from pathlib import Path

import numpy as np
import pytest

from streaming.format.encodings import EncodingError, UnknownEncodingError, encode_value, get_encoding
from streaming.format.images import IMAGE_ENCODING_NAMES, get_image_encoding, require_pillow

Image = pytest.importorskip("PIL.Image")


def make(mode: str, size: tuple[int, int] = (5, 3), seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
    shape = (size[1], size[0]) if channels == 1 else (size[1], size[0], channels)
    return Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode=mode)


def same(a: Image.Image, b: Image.Image) -> bool:
    return a.mode == b.mode and a.size == b.size and a.tobytes() == b.tobytes()


def jpeg_bytes(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="JPEG")
    return out.getvalue()


def enc(spec: str, obj: object) -> bytes:
    return encode_value(get_encoding(spec), obj)


def dec(spec: str, data: bytes) -> object:
    return get_encoding(spec).decode(memoryview(data))


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
def test_pil_golden_header_and_round_trip(mode: str) -> None:
    image = make(mode)
    data = enc("pil", image)
    assert data[:12] == struct.pack("<3I", 5, 3, len(mode))
    assert data[12 : 12 + len(mode)] == mode.encode()
    assert data[12 + len(mode) :] == image.tobytes()
    assert same(dec("pil", data), image)


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
def test_png_round_trip_lossless(mode: str) -> None:
    image = make(mode)
    data = enc("png", image)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert same(dec("png", data), image)


@pytest.mark.parametrize("mode", ["L", "RGB"])
def test_jpeg_round_trip(mode: str) -> None:
    image = make(mode, (16, 8))
    data = enc("jpeg", image)
    assert data == jpeg_bytes(image)  # Pillow defaults (quality 75), as upstream
    out = dec("jpeg", data)
    assert out.format == "JPEG" and out.mode == mode and out.size == (16, 8)


def test_jpeg_from_file_keeps_original_bytes(tmp_path: Path) -> None:
    path = tmp_path / "x.jpg"
    make("RGB", (8, 8)).save(path, format="JPEG", quality=95)
    with Image.open(path) as opened:
        assert enc("jpeg", opened) == path.read_bytes()
        path.unlink()  # source gone: falls back to re-encoding the pixels
        data = enc("jpeg", opened)
    assert data[:2] == b"\xff\xd8" and dec("jpeg", data).size == (8, 8)


def test_list_layout_and_round_trip() -> None:
    images = [make("RGB", seed=1), make("L", (2, 2), seed=2)]
    data = enc("list[pil]", images)
    parts = [enc("pil", im) for im in images]
    assert data == struct.pack("<4I", 0, 2, len(parts[0]), len(parts[1])) + b"".join(parts)
    out = dec("list[pil]", data)
    assert len(out) == 2 and all(same(a, b) for a, b in zip(out, images))
    png = dec("list[png]", enc("list[png]", images))
    assert all(same(a, b) for a, b in zip(png, images))
    jpg = dec("list[jpeg]", enc("list[jpeg]", tuple(images)))
    assert [(im.mode, im.size) for im in jpg] == [("RGB", (5, 3)), ("L", (2, 2))]


@pytest.mark.parametrize("spec", ["list[pil]", "list[jpeg]", "list[png]"])
def test_empty_list(spec: str) -> None:
    data = enc(spec, [])
    assert data == struct.pack("<2I", 0, 0)
    assert dec(spec, data) == []


def test_list_elements_may_be_pre_encoded_bytes() -> None:
    raw = jpeg_bytes(make("RGB"))
    data = enc("list[jpeg]", [raw])
    assert data == struct.pack("<3I", 0, 1, len(raw)) + raw


def test_jpeg_array_layout_no_placeholder() -> None:
    raws = [jpeg_bytes(make("RGB", seed=3)), jpeg_bytes(make("L", (4, 4), seed=4))]
    data = enc("jpeg_array", raws)
    assert data == struct.pack("<3I", 2, len(raws[0]), len(raws[1])) + raws[0] + raws[1]
    assert enc("jpegarray", [bytearray(r) for r in raws]) == data
    out = dec("jpegarray", data)
    assert [(im.mode, im.size) for im in out] == [("RGB", (5, 3)), ("L", (4, 4))]
    assert enc("jpeg_array", [make("RGB", seed=3)]) == struct.pack("<2I", 1, len(raws[0])) + raws[0]


def test_jpeg_array_empty_is_rejected_both_ways() -> None:
    with pytest.raises(EncodingError, match="empty list; a jpeg_array needs at least one image"):
        enc("jpeg_array", [])
    with pytest.raises(EncodingError, match="value holds 0 images"):
        dec("jpeg_array", struct.pack("<I", 0))


@pytest.mark.parametrize(
    ("spec", "value", "match"),
    [
        ("pil", np.zeros((2, 2), np.uint8), "needs a PIL.Image.Image, got numpy.ndarray"),
        ("jpeg", "x.jpg", "needs a PIL.Image.Image, got str"),
        ("png", 3, "needs a PIL.Image.Image"),
        ("jpeg", make("RGBA"), r"cannot save a mode RGBA image as JPEG .*convert\('RGB'\)"),
        ("list[pil]", make("RGB"), "needs a list of images, got PIL.Image.Image"),
        ("list[jpeg]", [make("RGB"), make("RGBA")], "element 1: .*cannot save a mode RGBA"),
        ("jpeg_array", "abc", "needs a list of JPEG bytes, got str"),
        ("jpeg_array", [b"x", 5], "element 1: .*needs a PIL.Image.Image"),
    ],
)
def test_encode_errors(spec: str, value: object, match: str) -> None:
    with pytest.raises(EncodingError, match=match):
        enc(spec, value)


@pytest.mark.parametrize(
    ("spec", "data", "match"),
    [
        ("pil", b"\x01\x00", "header needs 12"),
        ("pil", struct.pack("<3I", 4, 4, 1) + b"L" + b"\x00" * 3, "corrupt L 4x4 image"),
        ("list[pil]", b"\x00" * 4, "header needs 8"),
        ("list[png]", struct.pack("<3I", 0, 2, 1), "cannot hold 2 sizes"),
        ("list[png]", struct.pack("<3I", 0, 1, 5) + b"abc", "1 elements of 5 bytes do not fill 3"),
        ("jpeg_array", b"\x01", "header needs 4"),
    ],
)
def test_decode_errors(spec: str, data: bytes, match: str) -> None:
    with pytest.raises(EncodingError, match=match):
        dec(spec, data)


def test_registry() -> None:
    for name in IMAGE_ENCODING_NAMES:
        encoding = get_encoding(name)
        assert encoding.name == name and encoding.size is None and encoding.safe
    with pytest.raises(UnknownEncodingError, match="unknown image encoding 'gif'"):
        get_image_encoding("gif")


def test_missing_pillow_message(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_pil(name: str, *args: object, **kwargs: object) -> object:
        if name == "PIL" or name.startswith("PIL."):
            raise ImportError("No module named 'PIL'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pil)
    with pytest.raises(ImportError, match=r"pip install 'foundry-stack\[images\]'"):
        require_pillow()
    encoding = get_encoding("png")  # parsing the encoding string needs no Pillow
    with pytest.raises(ImportError, match="need Pillow"):
        encoding.decode(b"\x89PNG")
