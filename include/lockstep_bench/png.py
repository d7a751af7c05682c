"""A tiny pure-Python PNG line plot (matplotlib is not a dependency of this project).

Draws log-x series with markers, axes, grid lines and labels in a built-in 5x7 pixel font:
enough for "throughput vs input size" in docs/BENCHMARKS.md.
"""
from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Mapping, Sequence

# 5x7 glyphs, one string of 7 rows x 5 columns per character.
_FONT_ROWS = {
    "0": "01110100011001110101110011000101110", "1": "00100011000010000100001000010001110",
    "2": "01110100010000100010001000100011111", "3": "11111000100010000010000011000101110",
    "4": "00010001100101010010111110001000010", "5": "11111100001111000001000011000101110",
    "6": "00110010001000011110100011000101110", "7": "11111000010001000100010000100001000",
    "8": "01110100011000101110100011000101110", "9": "01110100011000101111000010001001100",
    ".": "00000000000000000000000000110001100", ",": "00000000000000000110001100010001000",
    "k": "10000100001001010100110001010010010", "M": "10001110111010110101100011000110001",
    "m": "00000000001101010101101011000110001", "/": "00001000010001000100010001000010000",
    "s": "00000000000111010000011100000111110", " ": "0" * 35, "-": "00000000000000011111000000000000000",
    "x": "00000000001000101010001000101010001", "r": "00000000001011011001100001000010000",
    "e": "00000000000111010001111111000001110", "c": "00000000000111010000100001000101110",
    "o": "00000000000111010001100011000101110", "d": "00001000010110110011100011000101111",
    "p": "00000111101000110001111101000010000", "t": "01000010001110001000010000100100110",
    "i": "00100000000110000100001000010001110", "n": "00000000001011011001100011000110001",
    "u": "00000000001000110001100011001101101", "a": "00000000000111000001011111000101111",
    "l": "01100001000010000100001000010001110", "g": "00000011111000110001011110000101110",
    "h": "10000100001011011001100011000110001", "w": "00000000001000110001101011010101010",
    "y": "00000000001000110001011110000101110", "v": "00000000001000110001100010101000100",
    "f": "00110010010100011100010000100001000", "b": "10000100001011011001100011000111110",
    "(": "00010001000100001000010000010000010", ")": "01000001000001000010000100010001000",
    "S": "01111100001000001110000010000111110", "L": "10000100001000010000100001000011111",
    "K": "10001100101010011000101001001010001", "A": "01110100011000111111100011000110001",
    "R": "11110100011000111110101001001010001", "W": "10001100011000110101101011010101010",
    "P": "11110100011000111110100001000010000", "I": "01110001000010000100001000010001110",
    "C": "01110100011000010000100001000101110", "N": "10001100011100110101100111000110001",
    "z": "00000000001111100010001000100011111", "T": "11111001000010000100001000010000100",
    "O": "01110100011000110001100011000101110", "E": "11111100001000011110100001000011111",
    "B": "11110100011000111110100011000111110", "F": "11111100001000011110100001000010000",
    "q": "00000011111000110001011110000100001", "j": "00010000000011000010000101001001100",
    ":": "00000011000110000000011000110000000", "%": "11000110010001000100010001001100011",
    "*": "00000001001010101110101010010000000", "=": "00000000001111100000111110000000000",
}


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(b"\xff" * (width * height * 3))

    def set(self, x: int, y: int, color: tuple[int, int, int]) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            i = (y * self.width + x) * 3
            self.pixels[i:i + 3] = bytes(color)

    def line(self, x0: float, y0: float, x1: float, y1: float, color: tuple[int, int, int], width: int = 1) -> None:
        steps = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        for s in range(steps + 1):
            t = s / steps
            x, y = round(x0 + (x1 - x0) * t), round(y0 + (y1 - y0) * t)
            for dx in range(-(width // 2), width - width // 2):
                for dy in range(-(width // 2), width - width // 2):
                    self.set(x + dx, y + dy, color)

    def box(self, x: int, y: int, size: int, color: tuple[int, int, int]) -> None:
        for dx in range(-size, size + 1):
            for dy in range(-size, size + 1):
                self.set(x + dx, y + dy, color)

    def text(self, x: int, y: int, text: str, color: tuple[int, int, int] = (0, 0, 0), scale: int = 2,
             anchor: str = "left") -> None:
        width = len(text) * 6 * scale
        if anchor == "center":
            x -= width // 2
        elif anchor == "right":
            x -= width
        for n, char in enumerate(text):
            rows = _FONT_ROWS.get(char, _FONT_ROWS.get(char.lower(), _FONT_ROWS[" "]))
            for r in range(7):
                for c in range(5):
                    if rows[r * 5 + c] == "1":
                        for sx in range(scale):
                            for sy in range(scale):
                                self.set(x + (n * 6 + c) * scale + sx, y + r * scale + sy, color)

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.pixels[y * self.width * 3:(y + 1) * self.width * 3])
                       for y in range(self.height))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


COLORS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14), (140, 86, 75),
          (23, 190, 207), (127, 127, 127)]


def _human(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:g}M"
    if v >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def line_plot(series: Mapping[str, Sequence[tuple[float, float]]], title: str, x_label: str, y_label: str,
              width: int = 1300, height: int = 540) -> bytes:
    """Log-x, linear-y line plot of ``{name: [(x, y), ...]}``; returns PNG bytes."""
    c = Canvas(width, height)
    left, right, top, bottom = 110, width - 540, 50, height - 70
    points = [pt for pts in series.values() for pt in pts if pt[0] > 0]
    xs = [math.log10(x) for x, _ in points] or [0, 1]
    x_lo, x_hi = math.floor(min(xs)), math.ceil(max(xs))
    if x_hi == x_lo:
        x_hi += 1
    y_max = max([y for _, y in points] or [1])
    magnitude = 10 ** math.floor(math.log10(y_max)) if y_max > 0 else 1
    step = next(s * magnitude for s in (0.2, 0.25, 0.5, 1, 2, 2.5, 5, 10) if y_max / (s * magnitude) <= 6)
    y_hi = step * math.ceil(y_max / step)

    def px(x: float) -> float:
        return left + (math.log10(x) - x_lo) / (x_hi - x_lo) * (right - left)

    def py(y: float) -> float:
        return bottom - y / y_hi * (bottom - top)

    grey, black = (220, 220, 220), (0, 0, 0)
    tick = 0.0
    while tick <= y_hi + 1e-9:
        c.line(left, py(tick), right, py(tick), grey)
        c.text(left - 8, round(py(tick)) - 7, _human(tick), anchor="right")
        tick += step
    for e in range(x_lo, x_hi + 1):
        c.line(px(10 ** e), top, px(10 ** e), bottom, grey)
        c.text(round(px(10 ** e)), bottom + 10, _human(10 ** e), anchor="center")
    c.line(left, bottom, right, bottom, black, 2)
    c.line(left, top, left, bottom, black, 2)
    c.text((left + right) // 2, 14, title, scale=2, anchor="center")
    c.text((left + right) // 2, height - 30, x_label, anchor="center")
    c.text(10, top - 30, y_label)
    for n, (name, pts) in enumerate(series.items()):
        color = COLORS[n % len(COLORS)]
        pts = sorted(pt for pt in pts if pt[0] > 0)
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            c.line(px(x0), py(y0), px(x1), py(y1), color, 3)
        for x, y in pts:
            c.box(round(px(x)), round(py(y)), 4, color)
        ly = top + 10 + n * 28
        c.line(right + 20, ly + 7, right + 50, ly + 7, color, 3)
        c.text(right + 58, ly, name)
    return c.png()
