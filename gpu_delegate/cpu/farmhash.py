"""FarmHash's Fingerprint64 (the "na" 64-bit hash), which TFLite's LSH_PROJECTION hashes its keys with.

Written from the published algorithm: little-endian 64-bit words, arithmetic modulo 2^64. A fingerprint is
fixed forever (unlike FarmHash's Hash64, which may change between versions), so these values are the ones
TFLite computes. Keys here are a few dozen bytes, so plain Python integers are fast enough.
"""

from __future__ import annotations

_MASK = (1 << 64) - 1
_K0 = 0xC3A5C85C97CB3127
_K1 = 0xB492B66FBE98F273
_K2 = 0x9AE16A3B2F90404F


def _u64(data: bytes, at: int) -> int:
    return int.from_bytes(data[at:at + 8], "little")


def _u32(data: bytes, at: int) -> int:
    return int.from_bytes(data[at:at + 4], "little")


def _rotr(value: int, shift: int) -> int:
    return value if shift == 0 else ((value >> shift) | (value << (64 - shift))) & _MASK


def _shift_mix(value: int) -> int:
    return value ^ (value >> 47)


def _mix16(u: int, v: int, mul: int) -> int:
    a = ((u ^ v) * mul) & _MASK
    a ^= a >> 47
    b = ((v ^ a) * mul) & _MASK
    b ^= b >> 47
    return (b * mul) & _MASK


def _len_0_to_16(s: bytes) -> int:
    n = len(s)
    if n >= 8:
        mul = _K2 + n * 2
        a = (_u64(s, 0) + _K2) & _MASK
        b = _u64(s, n - 8)
        c = (_rotr(b, 37) * mul + a) & _MASK
        d = ((_rotr(a, 25) + b) * mul) & _MASK
        return _mix16(c, d, mul)
    if n >= 4:
        mul = _K2 + n * 2
        return _mix16((n + (_u32(s, 0) << 3)) & _MASK, _u32(s, n - 4), mul)
    if n > 0:
        y = (s[0] + (s[n >> 1] << 8)) & 0xFFFFFFFF
        z = (n + (s[n - 1] << 2)) & 0xFFFFFFFF
        return (_shift_mix(((y * _K2) ^ (z * _K0)) & _MASK) * _K2) & _MASK
    return _K2


def _len_17_to_32(s: bytes) -> int:
    n = len(s)
    mul = _K2 + n * 2
    a = (_u64(s, 0) * _K1) & _MASK
    b = _u64(s, 8)
    c = (_u64(s, n - 8) * mul) & _MASK
    d = (_u64(s, n - 16) * _K2) & _MASK
    return _mix16((_rotr((a + b) & _MASK, 43) + _rotr(c, 30) + d) & _MASK,
                  (a + _rotr((b + _K2) & _MASK, 18) + c) & _MASK, mul)


def _len_33_to_64(s: bytes) -> int:
    n = len(s)
    mul = _K2 + n * 2
    a = (_u64(s, 0) * _K2) & _MASK
    b = _u64(s, 8)
    c = (_u64(s, n - 8) * mul) & _MASK
    d = (_u64(s, n - 16) * _K2) & _MASK
    y = (_rotr((a + b) & _MASK, 43) + _rotr(c, 30) + d) & _MASK
    z = _mix16(y, (a + _rotr((b + _K2) & _MASK, 18) + c) & _MASK, mul)
    e = (_u64(s, 16) * mul) & _MASK
    f = _u64(s, 24)
    g = ((y + _u64(s, n - 32)) * mul) & _MASK
    h = ((z + _u64(s, n - 24)) * mul) & _MASK
    return _mix16((_rotr((e + f) & _MASK, 43) + _rotr(g, 30) + h) & _MASK,
                  (e + _rotr((f + a) & _MASK, 18) + g) & _MASK, mul)


def _weak32(s: bytes, at: int, a: int, b: int) -> tuple[int, int]:
    """A 16-byte hash of the 32 bytes at ``at`` and two seeds."""
    w, x, y, z = (_u64(s, at + 8 * i) for i in range(4))
    a = (a + w) & _MASK
    b = _rotr((b + a + z) & _MASK, 21)
    c = a
    a = (a + x + y) & _MASK
    b = (b + _rotr(a, 44)) & _MASK
    return (a + z) & _MASK, (b + c) & _MASK


def fingerprint64(s: bytes) -> int:
    """FarmHash Fingerprint64 of ``s``, as an unsigned 64-bit integer."""
    n = len(s)
    if n <= 16:
        return _len_0_to_16(s)
    if n <= 32:
        return _len_17_to_32(s)
    if n <= 64:
        return _len_33_to_64(s)
    seed = 81
    y = (seed * _K1 + 113) & _MASK
    z = (_shift_mix((y * _K2 + 113) & _MASK) * _K2) & _MASK
    v = (0, 0)
    w = (0, 0)
    x = (seed * _K2 + _u64(s, 0)) & _MASK
    end = ((n - 1) // 64) * 64  # whole 64-byte blocks before the last 1..64 bytes
    for at in range(0, end, 64):
        x = (_rotr((x + y + v[0] + _u64(s, at + 8)) & _MASK, 37) * _K1) & _MASK
        y = (_rotr((y + v[1] + _u64(s, at + 48)) & _MASK, 42) * _K1) & _MASK
        x ^= w[1]
        y = (y + v[0] + _u64(s, at + 40)) & _MASK
        z = (_rotr((z + w[0]) & _MASK, 33) * _K1) & _MASK
        v = _weak32(s, at, (v[1] * _K1) & _MASK, (x + w[0]) & _MASK)
        w = _weak32(s, at + 32, (z + w[1]) & _MASK, (y + _u64(s, at + 16)) & _MASK)
        z, x = x, z
    mul = (_K1 + ((z & 0xFF) << 1)) & _MASK
    last = n - 64
    w = ((w[0] + ((n - 1) & 63)) & _MASK, w[1])
    v = ((v[0] + w[0]) & _MASK, v[1])
    w = ((w[0] + v[0]) & _MASK, w[1])
    x = (_rotr((x + y + v[0] + _u64(s, last + 8)) & _MASK, 37) * mul) & _MASK
    y = (_rotr((y + v[1] + _u64(s, last + 48)) & _MASK, 42) * mul) & _MASK
    x ^= (w[1] * 9) & _MASK
    y = (y + v[0] * 9 + _u64(s, last + 40)) & _MASK
    z = (_rotr((z + w[0]) & _MASK, 33) * mul) & _MASK
    v = _weak32(s, last, (v[1] * mul) & _MASK, (x + w[0]) & _MASK)
    w = _weak32(s, last + 32, (z + w[1]) & _MASK, (y + _u64(s, last + 16)) & _MASK)
    z, x = x, z
    return _mix16((_mix16(v[0], w[0], mul) + _shift_mix(y) * _K0 + z) & _MASK,
                  (_mix16(v[1], w[1], mul) + x) & _MASK, mul)
