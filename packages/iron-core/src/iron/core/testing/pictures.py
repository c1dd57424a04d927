"""Pictures in tests: an SVG drawn by a real renderer (resvg, through the
`resvg-py` package a test extra names) and its pixels read back, so a test
can say what a picture shows, not only that its file parses."""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET
import zlib

import numpy as np

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def rasterize(svg: str, width: int = 320) -> np.ndarray:
    """`svg` drawn `width` pixels wide by resvg: (height, width, 4) RGBA
    uint8. The text must parse as XML first (a renderer may forgive what a
    browser would not)."""
    ET.fromstring(svg)
    try:
        import resvg_py
    except ImportError as error:
        raise ImportError(
            "rasterize needs resvg-py (a test extra of the packages that draw pictures)"
        ) from error
    return png_pixels(bytes(resvg_py.svg_to_bytes(svg_string=svg, width=width)))


def png_pixels(data: bytes) -> np.ndarray:
    """The pixels of an 8-bit RGBA or RGB, non-interlaced PNG (what resvg
    writes) as (height, width, channels) uint8, every row unfiltered."""
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError("not a PNG: the signature is missing")
    at, idat, header = len(PNG_SIGNATURE), [], None
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        body = data[at + 8 : at + 8 + length]
        at += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError("not a PNG: no IHDR chunk")
    width, height, depth, colour, _, _, interlace = header
    channels = {2: 3, 6: 4}.get(colour)
    if depth != 8 or channels is None or interlace:
        raise ValueError(f"png_pixels reads 8-bit RGB(A) without interlace, not {header}")
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8)
    rows = raw.reshape(height, 1 + width * channels)
    pixels = np.zeros((height, width * channels), np.uint8)
    previous = np.zeros(width * channels, np.int32)
    for y in range(height):
        kind, line = rows[y, 0], rows[y, 1:].astype(np.int32)
        pixels[y] = previous = _unfilter(kind, line, previous, channels)
    return pixels.reshape(height, width, channels)


def _unfilter(kind: int, line: np.ndarray, up: np.ndarray, bpp: int) -> np.ndarray:
    """One row back from PNG filter `kind` (0 none, 1 sub, 2 up, 3 average, 4 Paeth)."""
    if kind == 0:
        return line
    if kind == 2:
        return (line + up) & 0xFF
    if kind == 1:  # each byte adds the one a pixel to its left: a running sum per channel
        return (np.cumsum(line.reshape(-1, bpp), axis=0) & 0xFF).reshape(-1)
    out = np.zeros_like(line)
    left = np.zeros(bpp, np.int32)
    upper_left = np.zeros(bpp, np.int32)
    for x in range(0, line.size, bpp):
        above = up[x : x + bpp]
        if kind == 3:
            value = line[x : x + bpp] + (left + above) // 2
        elif kind == 4:
            guess = left + above - upper_left
            a, b, c = np.abs(guess - left), np.abs(guess - above), np.abs(guess - upper_left)
            predictor = np.where((a <= b) & (a <= c), left, np.where(b <= c, above, upper_left))
            value = line[x : x + bpp] + predictor
        else:
            raise ValueError(f"PNG filter type {kind} is none of 0-4")
        out[x : x + bpp] = left = value & 0xFF
        upper_left = above
    return out
