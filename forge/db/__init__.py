"""Forge's database backends (``forge.db.postgresql``: row-level security)."""

from .postgresql.base import serve_as_app

__all__ = ["serve_as_app"]
