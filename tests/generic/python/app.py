"""The generic `example:types` component (tests/generic/wit/types.wit) in
Python, built with componentize-py: no Wharf SDK, plain WIT exports.

Every function behaves exactly as the WIT doc comments say; the Rust, JS
and C versions do the same (tests/all/generic_langs.rs compares them).
"""

from typing import Optional, Tuple, List

from componentize_py_types import Err
import wit_world
from wit_world import exports
from wit_world.exports import kinds


def _wrap(x: int, bits: int) -> int:
    """`x` as a two's-complement integer of `bits` bits."""
    half = 1 << (bits - 1)
    return ((x + half) % (1 << bits)) - half


class WitWorld(wit_world.WitWorld):
    def greet(self, name: str) -> str:
        return f"Hello, {name}!"


class Kinds(exports.Kinds):
    def add(self, a: int, b: int) -> int:
        return _wrap(a + b, 32)

    def ints(self, a: int, b: int, c: int, d: int, e: int, f: int, g: int, h: int) -> Tuple[int, int, int, int, int, int, int, int]:
        return (a, b, c, d, e, f, g, h)

    def floats(self, a: float, b: float) -> float:
        return a + b

    def next_char(self, c: str) -> str:
        n = ord(c)
        if n == 0xD7FF:
            return chr(0xE000)
        if n == 0x10FFFF:
            return chr(0)
        return chr(n + 1)

    def shout(self, s: str) -> str:
        return "".join(chr(ord(ch) - 32) if "a" <= ch <= "z" else ch for ch in s) + "!"

    def reverse_bytes(self, data: bytes) -> bytes:
        return bytes(reversed(data))

    def sum(self, xs: List[int]) -> int:
        return _wrap(sum(xs), 64)

    def mid(self, a: kinds.Point, b: kinds.Point) -> kinds.Point:
        label = a.label if a.label is not None else b.label
        return kinds.Point(x=(a.x + b.x) / 2, y=(a.y + b.y) / 2, label=label)

    def swap(self, t: Tuple[str, int]) -> Tuple[int, str]:
        return (t[1], t[0])

    def area(self, s: kinds.Shape) -> float:
        if isinstance(s, kinds.Shape_Circle):
            return 3.141592653589793 * s.value * s.value
        if isinstance(s, kinds.Shape_Rect):
            return s.value.x * s.value.y
        return 0.0

    def rotate(self, c: kinds.Color) -> kinds.Color:
        return {
            kinds.Color.RED: kinds.Color.GREEN,
            kinds.Color.GREEN: kinds.Color.BLUE,
            kinds.Color.BLUE: kinds.Color.RED,
        }[c]

    def toggle(self, p: kinds.Perms) -> kinds.Perms:
        every = kinds.Perms.READ | kinds.Perms.WRITE | kinds.Perms.EXEC
        return every & ~p

    def double(self, x: Optional[int]) -> Optional[int]:
        if x is None:
            return None
        return (x * 2) % (1 << 32)

    def divide(self, a: int, b: int) -> int:
        if b == 0:
            raise Err("division by zero")
        if a == -(1 << 31) and b == -1:
            raise Err("overflow")
        q = abs(a) // abs(b)
        return q if (a < 0) == (b < 0) else -q
