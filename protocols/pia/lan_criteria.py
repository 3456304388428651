"""What a LAN browser asks for: search criteria (5.x) and search network settings (6.x).

Theory of operation: a browse request (spec §6.2) carries either a
:class:`LanSessionSearchCriteria` (Pia 5.2-5.45, 570 bytes) or a
:class:`LanSearchNetworkSetting` (6.16-6.30).  Every field is on the wire even
when unused; a bit in ``search_flags`` says which criteria a host must
evaluate.  The values keep every byte (unused list slots, unused range bounds)
so decode followed by encode gives the same bytes.

Matching (spec §6.2, NC matching rule): ranges are inclusive; "vacant" means
``current < max``; an attribute matches by range (range mode) or by equality
with one of the first *n* list values (list mode).  A criterion whose flag is
clear is not evaluated.  The result range is carried but ignored, as consoles
(which host at most one session) ignore it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import attrs

from protocols.errors import BadValue, ConfigError, EncodeError
from protocols.pia.versions import VersionProfile
from protocols.wire import Reader, Writer


class LanSessionInfo(Protocol):
    """What :meth:`LanSessionSearchCriteria.matches` reads of a host's session
    (``protocols.pia.lan.LanSessionInfo``, which imports this module)."""

    min_participants: int
    max_participants: int
    current_participants: int
    is_opened: bool
    game_mode: int
    session_type: int
    attributes: tuple[int, ...]


class LanNetworkProperty(Protocol):
    """What :meth:`LanSearchNetworkSetting.matches` reads of a 6.x host's
    ``protocols.pia.lan.LanNetworkProperty``."""

    matchmake_key: int
    max_stations: int
    current_stations: int
    is_opened: bool

__all__ = [
    "ATTRIBUTE_COUNT",
    "ATTRIBUTE_LIST_SIZE",
    "CRITERIA_SIZE",
    "AttributeCriterion",
    "LanSearchNetworkSetting",
    "LanSessionSearchCriteria",
    "Range",
    "SearchFlag",
]

ATTRIBUTE_COUNT = 6
ATTRIBUTE_LIST_SIZE = 20
CRITERIA_SIZE = 0x23A  # 570 bytes, spec §6.2


class SearchFlag:
    """Bits of ``LanSessionSearchCriteria.search_flags`` (spec §6.2)."""

    MIN_PARTICIPANTS = 0x1
    MAX_PARTICIPANTS = 0x2
    OPENED_ONLY = 0x4
    VACANT_ONLY = 0x8
    GAME_MODE = 0x10
    SESSION_TYPE = 0x20

    @staticmethod
    def attribute(i: int) -> int:
        """Flag of attribute *i* (0..5): ``0x40 << i``."""
        return 0x40 << i


def _bool(r: Reader, what: str) -> bool:
    v = r.u8(what)
    if v > 1:
        raise BadValue(f"{what}: boolean byte {v}")
    return v == 1


@attrs.frozen
class Range:
    """An inclusive range ``min <= x <= max``."""

    min: int = 0
    max: int = 0

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and self.min <= value <= self.max


def _pad_list(values: Iterable[int]) -> tuple[int, ...]:
    t = tuple(values)
    if len(t) > ATTRIBUTE_LIST_SIZE:
        raise EncodeError(f"an attribute list holds at most {ATTRIBUTE_LIST_SIZE} values, got {len(t)}")
    return t + (0,) * (ATTRIBUTE_LIST_SIZE - len(t))


@attrs.frozen
class AttributeCriterion:
    """One of the six attribute criteria: a value list or an inclusive range.

    ``list_values`` always has 20 slots (the wire keeps them all); only the first
    ``list_size`` take part in list-mode matching.
    """

    list_values: tuple[int, ...] = attrs.field(default=(), converter=_pad_list)
    list_size: int = 0
    range_min: int = 0
    range_max: int = 0
    range_mode: bool = False

    @classmethod
    def one_of(cls, *values: int) -> AttributeCriterion:
        return cls(list_values=values, list_size=len(values))

    @classmethod
    def between(cls, lo: int, hi: int) -> AttributeCriterion:
        return cls(range_min=lo, range_max=hi, range_mode=True)

    @property
    def values(self) -> tuple[int, ...]:
        """The list values in use (at most 20, whatever the size byte says)."""
        return self.list_values[: min(self.list_size, ATTRIBUTE_LIST_SIZE)]

    def matches(self, value: int) -> bool:
        if self.range_mode:
            return self.range_min <= value <= self.range_max
        return value in self.values


@attrs.frozen
class LanSessionSearchCriteria:
    """LanSessionSearchCriteria, Pia 5.2-5.45 (570 bytes, spec §6.2).

    Build one with :meth:`build` (which sets ``search_flags`` from the criteria
    given) or with every field for byte-exact work.
    """

    min_participants: Range = Range()
    max_participants: Range = Range()
    opened_only: bool = False
    vacant_only: bool = False
    result_range_offset: int = 0
    result_range_size: int = 0
    game_mode: int = 0
    session_type: int = 0
    attributes: tuple[AttributeCriterion, ...] = (AttributeCriterion(),) * ATTRIBUTE_COUNT
    search_flags: int = 0

    def __attrs_post_init__(self) -> None:
        if len(self.attributes) != ATTRIBUTE_COUNT:
            raise EncodeError(f"search criteria need {ATTRIBUTE_COUNT} attribute criteria, got {len(self.attributes)}")

    @classmethod
    def build(
        cls,
        *,
        min_participants: Range | None = None,
        max_participants: Range | None = None,
        opened_only: bool | None = None,
        vacant_only: bool | None = None,
        game_mode: int | None = None,
        session_type: int | None = None,
        attributes: dict[int, AttributeCriterion] | None = None,
        result_range: tuple[int, int] = (0, 10),
    ) -> LanSessionSearchCriteria:
        """Criteria with a search flag set for each argument that is not None."""
        flags = 0
        attrs_list = [AttributeCriterion()] * ATTRIBUTE_COUNT
        if min_participants is not None:
            flags |= SearchFlag.MIN_PARTICIPANTS
        if max_participants is not None:
            flags |= SearchFlag.MAX_PARTICIPANTS
        if opened_only is not None:
            flags |= SearchFlag.OPENED_ONLY
        if vacant_only is not None:
            flags |= SearchFlag.VACANT_ONLY
        if game_mode is not None:
            flags |= SearchFlag.GAME_MODE
        if session_type is not None:
            flags |= SearchFlag.SESSION_TYPE
        for i, crit in (attributes or {}).items():
            if not 0 <= i < ATTRIBUTE_COUNT:
                raise ConfigError(f"attribute index {i} out of range 0..5")
            attrs_list[i] = crit
            flags |= SearchFlag.attribute(i)
        return cls(
            min_participants=min_participants or Range(),
            max_participants=max_participants or Range(),
            opened_only=bool(opened_only),
            vacant_only=bool(vacant_only),
            result_range_offset=result_range[0],
            result_range_size=result_range[1],
            game_mode=game_mode or 0,
            session_type=session_type or 0,
            attributes=tuple(attrs_list),
            search_flags=flags,
        )

    def matches(self, info: LanSessionInfo) -> bool:
        """Whether a host's session satisfies every criterion whose flag is set."""
        f = self.search_flags
        if f & SearchFlag.MIN_PARTICIPANTS and info.min_participants not in self.min_participants:
            return False
        if f & SearchFlag.MAX_PARTICIPANTS and info.max_participants not in self.max_participants:
            return False
        if f & SearchFlag.OPENED_ONLY and self.opened_only and not info.is_opened:
            return False
        if f & SearchFlag.VACANT_ONLY and self.vacant_only and info.current_participants >= info.max_participants:
            return False
        if f & SearchFlag.GAME_MODE and info.game_mode != self.game_mode:
            return False
        if f & SearchFlag.SESSION_TYPE and info.session_type != self.session_type:
            return False
        for i, crit in enumerate(self.attributes):
            if f & SearchFlag.attribute(i) and not crit.matches(info.attributes[i]):
                return False
        return True

    # -- wire ----------------------------------------------------------
    def encode(self) -> bytes:
        w = Writer()
        # u16 max before u16 min (spec §6.2 table).
        w.u16(self.min_participants.max, "min_participants.max")
        w.u16(self.min_participants.min, "min_participants.min")
        w.u16(self.max_participants.max, "max_participants.max")
        w.u16(self.max_participants.min, "max_participants.min")
        w.u8(int(self.opened_only))
        w.u8(int(self.vacant_only))
        w.u32(self.result_range_offset, "result_range_offset")
        w.u32(self.result_range_size, "result_range_size")
        w.u32(self.game_mode, "game_mode")
        w.u32(self.session_type, "session_type")
        for a in self.attributes:
            for v in a.list_values:
                w.u32(v, "attribute value")
        for a in self.attributes:
            w.u8(a.list_size, "attribute list size")
        for a in self.attributes:
            w.u32(a.range_min, "attribute range min")
        for a in self.attributes:
            w.u32(a.range_max, "attribute range max")
        for a in self.attributes:
            w.u8(int(a.range_mode))
        w.u32(self.search_flags, "search_flags")
        return w.getvalue()

    @classmethod
    def decode(cls, data: bytes) -> LanSessionSearchCriteria:
        r = Reader(data)
        crit = cls.read(r)
        r.expect_end("LanSessionSearchCriteria")
        return crit

    @classmethod
    def read(cls, r: Reader) -> LanSessionSearchCriteria:
        with r.restrict_to(CRITERIA_SIZE, "LanSessionSearchCriteria") as s:
            mn_max, mn_min = s.u16(), s.u16()
            mx_max, mx_min = s.u16(), s.u16()
            opened = _bool(s, "opened only")
            vacant = _bool(s, "vacant only")
            off, size = s.u32(), s.u32()
            game_mode, session_type = s.u32(), s.u32()
            lists = [tuple(s.u32() for _ in range(ATTRIBUTE_LIST_SIZE)) for _ in range(ATTRIBUTE_COUNT)]
            sizes = [s.u8() for _ in range(ATTRIBUTE_COUNT)]
            mins = [s.u32() for _ in range(ATTRIBUTE_COUNT)]
            maxs = [s.u32() for _ in range(ATTRIBUTE_COUNT)]
            modes = [_bool(s, "attribute range mode") for _ in range(ATTRIBUTE_COUNT)]
            flags = s.u32()
        return cls(
            min_participants=Range(mn_min, mn_max),
            max_participants=Range(mx_min, mx_max),
            opened_only=opened,
            vacant_only=vacant,
            result_range_offset=off,
            result_range_size=size,
            game_mode=game_mode,
            session_type=session_type,
            attributes=tuple(
                AttributeCriterion(lists[i], sizes[i], mins[i], maxs[i], modes[i]) for i in range(ATTRIBUTE_COUNT)
            ),
            search_flags=flags,
        )


class NetworkSettingFlag:
    """Flags of :class:`LanSearchNetworkSetting` per version (spec §6.2)."""

    # 6.16-6.26
    KEY = 0x1
    MAX_STATIONS = 0x2
    OPENED_ONLY = 0x4
    VACANT_ONLY = 0x8

    @staticmethod
    def for_version(profile: VersionProfile) -> dict[str, int]:
        """Flag bits by meaning; 6.29-6.30 shifted every bit up by one (bit 0x1 ignored)."""
        if profile.version >= (6, 29):
            return {"key": 0x2, "max_stations": 0x4, "opened_only": 0x8, "vacant_only": 0x10}
        return {"key": 0x1, "max_stations": 0x2, "opened_only": 0x4, "vacant_only": 0x8}


@attrs.frozen
class LanSearchNetworkSetting:
    """LanSearchNetworkSetting, Pia 6.16-6.30 (spec §6.2).

    ``title_id`` is on the wire from 6.23 (22 bytes); None for the 14-byte form.
    """

    matchmake_key: int = 0
    max_stations_upper: int = 0
    max_stations_lower: int = 0
    flags: int = 0
    title_id: int | None = None

    @staticmethod
    def size_for(profile: VersionProfile) -> int:
        return 0x16 if profile.version >= (6, 23) else 0xE

    def encode(self, profile: VersionProfile) -> bytes:
        w = Writer()
        w.u64(self.matchmake_key, "matchmake_key")
        w.u16(self.max_stations_upper, "max_stations_upper")
        w.u16(self.max_stations_lower, "max_stations_lower")
        w.u16(self.flags, "flags")
        if profile.version >= (6, 23):
            if self.title_id is None:
                raise EncodeError(f"Pia {profile.name} search settings carry a title id")
            w.u64(self.title_id, "title_id")
        elif self.title_id is not None:
            raise EncodeError(f"Pia {profile.name} search settings have no title id")
        return w.getvalue()

    @classmethod
    def read(cls, r: Reader, profile: VersionProfile) -> LanSearchNetworkSetting:
        key, upper, lower, flags = r.u64(), r.u16(), r.u16(), r.u16()
        title = r.u64("title id") if profile.version >= (6, 23) else None
        return cls(key, upper, lower, flags, title)

    @classmethod
    def decode(cls, data: bytes, profile: VersionProfile) -> LanSearchNetworkSetting:
        r = Reader(data)
        v = cls.read(r, profile)
        r.expect_end("LanSearchNetworkSetting")
        return v

    def matches(self, prop: LanNetworkProperty, profile: VersionProfile) -> bool:
        """Matching for 6.x by analogy with the 5.x rules (inclusive range, flags gate)."""
        bits = NetworkSettingFlag.for_version(profile)
        if self.flags & bits["key"] and prop.matchmake_key != self.matchmake_key:
            return False
        if self.flags & bits["max_stations"] and not (
            self.max_stations_lower <= prop.max_stations <= self.max_stations_upper
        ):
            return False
        if self.flags & bits["opened_only"] and not prop.is_opened:
            return False
        return not (self.flags & bits["vacant_only"] and prop.current_stations >= prop.max_stations)
