"""Times on the wire (``accounts.times``), as the memory store's modules and migrations
name them."""

from accounts.times import format_time, now_ms, parse_time

__all__ = ["format_time", "now_ms", "parse_time"]
