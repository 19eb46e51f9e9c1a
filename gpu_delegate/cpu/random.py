"""TensorFlow's Philox4x32-10 counter-based generator and the distributions TFLite draws from it
(random_ops.cc): uniform floats, Box-Muller normals and multinomial samples, number for number.

A generator is its 128-bit counter and 64-bit key; each call yields four uint32 and steps the counter by one.
"""

from __future__ import annotations

import math

import numpy as np

from .jit import njit

_MASK = 0xFFFFFFFF


class Philox:
    """PhiloxRandom(seed_lo, seed_hi): key = seed_lo, counter words 2 and 3 = seed_hi."""

    def __init__(self, seed: int, seed2: int):
        lo, hi = seed & 0xFFFFFFFFFFFFFFFF, seed2 & 0xFFFFFFFFFFFFFFFF
        self.key = np.array([lo & _MASK, lo >> 32], np.uint64)
        self.counter = np.array([0, 0, hi & _MASK, hi >> 32], np.uint64)

    def blocks(self, n: int) -> np.ndarray:
        """n calls of the generator: [n, 4] uint32."""
        out = np.empty((n, 4), np.uint32)
        _philox(self.key, self.counter, n, out)
        return out

    def skip(self, n: int) -> None:
        """Step the 128-bit counter by n."""
        value = sum(int(w) << (32 * i) for i, w in enumerate(self.counter)) + n
        self.counter[:] = [(value >> (32 * i)) & _MASK for i in range(4)]


@njit(cache=True)
def _philox(key, counter, n, out):
    mask = np.uint64(_MASK)
    for b in range(n):
        c0, c1, c2, c3 = counter[0], counter[1], counter[2], counter[3]
        k0, k1 = key[0], key[1]
        for r in range(10):
            p0 = np.uint64(0xD2511F53) * c0
            p1 = np.uint64(0xCD9E8D57) * c2
            c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & mask, (p0 >> np.uint64(32)) ^ c3 ^ k1,
                              p0 & mask)
            if r < 9:
                k0 = (k0 + np.uint64(0x9E3779B9)) & mask
                k1 = (k1 + np.uint64(0xBB67AE85)) & mask
        out[b, 0], out[b, 1], out[b, 2], out[b, 3] = c0, c1, c2, c3
        for i in range(4):  # the 128-bit counter steps by one
            counter[i] = (counter[i] + np.uint64(1)) & mask
            if counter[i] != 0:
                break


def uint32_to_float(x: np.ndarray) -> np.ndarray:
    """A float in [0, 1) from the low 23 bits: 1.mantissa - 1."""
    bits = (np.asarray(x, np.uint32) & np.uint32(0x7FFFFF)) | np.uint32(0x3F800000)
    return bits.view(np.float32) - np.float32(1.0)


def uint64_to_double(x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
    """A double in [0, 1) from 20 bits of x0 and all of x1."""
    man = ((np.asarray(x0, np.uint64) & np.uint64(0xFFFFF)) << np.uint64(32)) | np.asarray(x1, np.uint64)
    return (man | (np.uint64(1023) << np.uint64(52))).view(np.float64) - 1.0


def uniform(rng: Philox, size: int) -> np.ndarray:
    """Four floats per call; the unused tail of the last call is dropped."""
    return uint32_to_float(rng.blocks(-(-size // 4)).reshape(-1)[:size])


def standard_normal(rng: Philox, size: int) -> np.ndarray:
    """Box-Muller on each pair of a call's four numbers (TSL's BoxMullerFloat)."""
    x = rng.blocks(-(-size // 4)).reshape(-1, 2)
    u1 = np.maximum(uint32_to_float(x[:, 0]), np.float32(1e-7))
    v1 = (2.0 * math.pi * uint32_to_float(x[:, 1]).astype(np.float64)).astype(np.float32)
    u2 = np.sqrt(np.float32(-2.0) * np.log(u1))
    pairs = np.stack([np.sin(v1) * u2, np.cos(v1) * u2], axis=1)
    return pairs.reshape(-1)[:size].astype(np.float32)


def multinomial(rng: Philox, logits: np.ndarray, num_samples: int) -> np.ndarray:
    """[batch, num_samples] class indices (int64): the first class whose cumulative exp(logit - max) exceeds
    a uniform double times the total. Draws from a copy of the generator, then skips the original far ahead,
    as TFLite does."""
    batch, classes = logits.shape
    draws = Philox(0, 0)
    draws.key[:], draws.counter[:] = rng.key, rng.counter
    rng.skip(batch * ((num_samples + 3) // 4 * 4) * 2 * 256)
    out = np.empty((batch, num_samples), np.int64)
    words = draws.blocks(-(-batch * num_samples * 2 // 4)).reshape(-1)
    pairs = words[: batch * num_samples * 2].reshape(batch, num_samples, 2)
    for b in range(batch):
        row = logits[b]
        finite = np.isfinite(row)
        top = float(row[finite].max()) if finite.any() else float(np.finfo(np.float32).min)
        terms = np.where(finite, np.exp(row.astype(np.float64) - top), 0.0)
        cdf = np.cumsum(terms)
        targets = uint64_to_double(pairs[b, :, 0], pairs[b, :, 1]) * cdf[-1]
        out[b] = np.searchsorted(cdf, targets, side="right")
    return out


# -- STABLEHLO_RNG_BIT_GENERATOR (TFLite's rng_util: a 64-bit counter in the first two counter words) ----------

@njit(cache=True)
def _rotl(v, r):
    return ((v << np.uint64(r)) | (v >> np.uint64(32 - r))) & np.uint64(_MASK)


@njit(cache=True)
def _bit_stream(algorithm, key0, key1, ctr, n_words, out):
    """n_words uint32 into out; ctr (uint64 holding uint32 words) steps in place. algorithm 2: Threefry2x32 (20
    rounds), else Philox4x32-10."""
    mask = np.uint64(_MASK)
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    i = 0
    while i < n_words:
        if algorithm == 2:
            key2 = key0 ^ key1 ^ np.uint64(0x1BD11BDA)
            keys = (key0, key1, key2)
            c0, c1 = (ctr[0] + key0) & mask, (ctr[1] + key1) & mask
            for step in range(5):
                for rot in rotations[step % 2]:
                    c0 = (c0 + c1) & mask
                    c1 = _rotl(c1, rot) ^ c0
                c0 = (c0 + keys[(step + 1) % 3]) & mask
                c1 = (c1 + keys[(step + 2) % 3] + np.uint64(step + 1)) & mask
            block = (c0, c1, c0, c1)
            size = 2
        else:
            c0, c1, c2, c3 = ctr[0], ctr[1], ctr[2], ctr[3]
            k0, k1 = key0, key1
            for _ in range(10):
                p0 = np.uint64(0xD2511F53) * c0
                p1 = np.uint64(0xCD9E8D57) * c2
                c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & mask, (p0 >> np.uint64(32)) ^ c3 ^ k1,
                                  p0 & mask)
                k0 = (k0 + np.uint64(0x9E3779B9)) & mask
                k1 = (k1 + np.uint64(0xBB67AE85)) & mask
            block = (c0, c1, c2, c3)
            size = 4
        for j in range(min(size, n_words - i)):
            out[i + j] = block[j]
        i += size
        ctr[0] = (ctr[0] + np.uint64(1)) & mask
        if ctr[0] == 0:
            ctr[1] = (ctr[1] + np.uint64(1)) & mask


def rng_bit_generator(state: np.ndarray, algorithm: int, n_words: int) -> tuple[np.ndarray, np.ndarray]:
    """(new state, n_words uint32) from a uint64 state: [key, counter] for Threefry, [key, counter(, more
    counter)] for Philox, as TFLite lays them out."""
    words = state.astype(np.uint64).view(np.uint32).astype(np.uint64)
    if algorithm == 2:
        ctr = words[2:4].copy()
    else:
        extra = (4, 5) if state.size == 3 else (0, 1)
        ctr = np.array([words[2], words[3], words[extra[0]], words[extra[1]]], np.uint64)
    out = np.empty(n_words, np.uint64)
    _bit_stream(algorithm, words[0], words[1], ctr, n_words, out)
    new_words = words.copy()
    new_words[2], new_words[3] = ctr[0], ctr[1]
    return new_words.astype(np.uint32).view(np.uint64), out.astype(np.uint32)
