"""SEAD's random number generator and ENL's game-key generation.

Theory of operation
-------------------
Nintendo's SEAD library ships a small xorshift128 generator.  Its state is four
u32 words.  It is seeded either from one u32 (each word chains from the
previous one through the multiplier 0x6C078965, the same constant the
Mersenne Twister seeding uses) or from four words taken as they are.  Each
draw mixes the first and last words and shifts the state by one word.

Pia uses it in one place of its own: the LDN 5.9-5.45 session key is four
draws from a generator seeded with the session parameter (spec §3.3, §11; see
:func:`protocols.pia.keys.ldn_session_key`).  ENL, the matchmaking layer of
many first-party games, uses it to build the Pia game key: every key byte is
one byte of a word picked at random from a game-provided table (spec §3.5).

Spec: ../shared/spec/pia.md §3.4 (generator), §3.5 (ENL keys), §8.1 and §8.2
D1-D3 (vectors).
"""

from __future__ import annotations

from collections.abc import Sequence

from protocols.errors import ConfigError

__all__ = ["Random", "enl_game_key"]

_MASK32 = 0xFFFFFFFF
# Seeding multiplier (spec §3.4).
_SEED_MULTIPLIER = 0x6C078965


def _check_u32(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MASK32:
        raise ConfigError(f"{what} must be an integer in 0..0xFFFFFFFF, got {value!r}")
    return value


class Random:
    """SEAD's xorshift128 generator (spec §3.4).

    ``Random(seed)`` seeds from one u32; ``Random([w0, w1, w2, w3])`` (any
    sequence of four u32 words) takes the state as it is.  The object is
    mutable: every draw advances it.
    """

    __slots__ = ("_s0", "_s1", "_s2", "_s3")

    def __init__(self, seed: int | Sequence[int] = 0) -> None:
        if isinstance(seed, int) and not isinstance(seed, bool):
            self._seed_u32(_check_u32(seed, "SEAD seed"))
        elif isinstance(seed, Sequence) and not isinstance(seed, (str, bytes, bytearray)):
            if len(seed) != 4:
                raise ConfigError(f"a SEAD state is 4 u32 words, got {len(seed)}")
            words = [_check_u32(w, "SEAD state word") for w in seed]
            self._s0, self._s1, self._s2, self._s3 = words
        else:
            raise ConfigError(f"SEAD Random takes a u32 seed or 4 state words, got {seed!r}")

    def _seed_u32(self, seed: int) -> None:
        # Each word: t ^= t >> 30; t = t * 0x6C078965 + i (i = 1..4), chained.
        words = []
        t = seed
        for i in range(1, 5):
            t = ((t ^ (t >> 30)) * _SEED_MULTIPLIER + i) & _MASK32
            words.append(t)
        self._s0, self._s1, self._s2, self._s3 = words

    @property
    def state(self) -> tuple[int, int, int, int]:
        """The four state words (a copy; feed it back to ``Random`` to fork)."""
        return (self._s0, self._s1, self._s2, self._s3)

    def u32(self) -> int:
        """Draw the next u32."""
        t = self._s0
        t ^= (t << 11) & _MASK32
        t ^= t >> 8
        last = self._s3
        t ^= last ^ (last >> 19)
        self._s0, self._s1, self._s2, self._s3 = self._s1, self._s2, last, t
        return t

    def u64(self) -> int:
        """Draw a u64: the first u32 drawn is the high word (spec §3.4, KW)."""
        high = self.u32()
        return (high << 32) | self.u32()

    def uint(self, maximum: int) -> int:
        """Draw an integer in ``0 .. maximum - 1`` as ``(u32() * maximum) >> 32``.

        ``maximum`` may be 0..2**32; 0 always yields 0 (and still draws).
        """
        if isinstance(maximum, bool) or not isinstance(maximum, int) or not 0 <= maximum <= 1 << 32:
            raise ConfigError(f"SEAD uint() bound must be in 0..2**32, got {maximum!r}")
        return (self.u32() * maximum) >> 32

    def __repr__(self) -> str:
        words = " ".join(f"{w:08X}" for w in self.state)
        return f"Random(state=[{words}])"


def enl_game_key(table: Sequence[int], rng: Random, size: int = 16) -> bytes:
    """Build an ENL game key from a game's word table (spec §3.5).

    Every group of four key bytes is one little-endian u32 whose bytes, most
    significant first, are each picked as: a random word of *table*
    (``rng.uint(len(table))``), then a random byte of that word
    (``rng.uint(4) * 8`` bits down).

    Args:
        table: the game's u32 words (64 in every known game).
        rng: the generator, already seeded or set to the game's state; it is
            advanced by ``2 * size`` draws.
        size: key length in bytes, a multiple of 4.

    Raises:
        ConfigError: empty table, a word outside u32, or a size that is not a
            positive multiple of 4.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0 or size % 4:
        raise ConfigError(f"ENL key size must be a positive multiple of 4, got {size!r}")
    words = [_check_u32(w, "ENL table word") for w in table]
    if not words:
        raise ConfigError("ENL key table is empty")
    n = len(words)
    out = bytearray()
    for _ in range(size // 4):
        value = 0
        for _ in range(4):
            word = words[rng.uint(n)]
            shift = rng.uint(4) * 8
            value = (value << 8) | ((word >> shift) & 0xFF)
        out += value.to_bytes(4, "little")
    return bytes(out)
