"""The memory store's ids: ``mco_`` cores, ``mun_`` units, ``msl_`` slices and ``mss_``
memory sessions (opaque, URL-safe, sorting in creation order: ``accounts.ids``)."""

from __future__ import annotations

from accounts.ids import ID_RE, is_valid_id, new_id

__all__ = [
    "ID_MAX",
    "ID_RE",
    "is_valid_id",
    "new_core_id",
    "new_memory_session_id",
    "new_slice_id",
    "new_unit_id",
]

ID_MAX = 64


def new_core_id() -> str:
    return new_id("mco")


def new_unit_id() -> str:
    return new_id("mun")


def new_slice_id() -> str:
    return new_id("msl")


def new_memory_session_id() -> str:
    return new_id("mss")
