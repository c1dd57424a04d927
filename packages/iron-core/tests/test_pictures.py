"""iron.core.testing.pictures: PNG rows read back through every filter, and
an SVG drawn by resvg with its colours where the SVG put them."""

import struct
import zlib

import numpy as np
import pytest

from iron.core.testing.pictures import PNG_SIGNATURE, png_pixels, rasterize


def paeth(left, up, upper_left):
    guess = left + up - upper_left
    a, b, c = abs(guess - left), abs(guess - up), abs(guess - upper_left)
    return left if a <= b and a <= c else up if b <= c else upper_left


def encode(image: np.ndarray, filters) -> bytes:
    """A PNG of `image` (h, w, 4) whose row y is written with filter filters[y]."""
    height, width, bpp = image.shape
    flat = image.reshape(height, width * bpp).astype(int)
    raw = bytearray()
    for y, kind in enumerate(filters):
        row, up = flat[y], flat[y - 1] if y else np.zeros(width * bpp, int)
        left = [row[x - bpp] if x >= bpp else 0 for x in range(row.size)]
        upper_left = [up[x - bpp] if x >= bpp else 0 for x in range(row.size)]
        predict = {
            0: [0] * row.size,
            5: [0] * row.size,  # no such filter: the bytes as they are
            1: left,
            2: list(up),
            3: [(a + b) // 2 for a, b in zip(left, up)],
            4: [paeth(a, b, c) for a, b, c in zip(left, up, upper_left)],
        }[kind]
        raw += bytes([kind]) + bytes((int(v) - p) & 0xFF for v, p in zip(row, predict))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return (
        PNG_SIGNATURE
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(raw)))
        + chunk(b"IEND", b"")
    )


def test_png_rows_come_back_through_every_filter():
    image = np.random.default_rng(0).integers(0, 256, (10, 7, 4), dtype=np.uint8)
    filters = [0, 1, 2, 3, 4, 4, 3, 2, 1, 0]
    assert np.array_equal(png_pixels(encode(image, filters)), image)
    with pytest.raises(ValueError, match="PNG filter type 5 is none of 0-4"):
        png_pixels(encode(image, [5, *filters[1:]]))
    with pytest.raises(ValueError, match="not a PNG"):
        png_pixels(b"GIF89a")


def test_an_svg_is_drawn_where_it_says():
    pytest.importorskip("resvg_py", reason="resvg-py is iron-core's test extra")
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="200" height="100">'
        '<rect width="100" height="100" fill="#ff0000"/>'
        '<rect x="100" width="100" height="100" fill="#0000ff"/></svg>'
    )
    pixels = rasterize(svg, width=40)
    assert pixels.shape == (20, 40, 4)
    assert (pixels[:, :20] == [255, 0, 0, 255]).all() and (pixels[:, 20:] == [0, 0, 255, 255]).all()
    with pytest.raises(Exception, match=r"mismatched tag|not well-formed"):
        rasterize("<svg><rect></svg>")
