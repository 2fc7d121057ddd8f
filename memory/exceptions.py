"""Errors raised by the memory store. Each carries a stable ``code`` and an HTTP ``status``.

``MemoryStoreError`` is the base, itself a ``ForgeError`` (``accounts.exceptions``),
so every face translates it like any other error. Bad input is a ``ValueError``
subclass, a missing (or another tenant's) object a ``LookupError`` subclass, so
callers that know neither class still catch them sensibly.
"""

from __future__ import annotations

from accounts.exceptions import ForgeError


class MemoryStoreError(ForgeError):
    code = "memory_error"
    status = 500


class InvalidInput(MemoryStoreError, ValueError):
    """An argument the store refuses (a bad message, role, agent name, limit …)."""

    code = "invalid"
    status = 400


class InvalidQuery(InvalidInput):
    """A search query or limit the store refuses (too long, bad limit)."""

    code = "invalid_query"


class InvalidRollingOption(InvalidInput):
    """A rolling threshold, keep count or idle time out of range."""

    code = "invalid_rolling_option"


class NotFound(MemoryStoreError, LookupError):
    """No such core, unit or slice in this tenant (another tenant's is not found either)."""

    code = "not_found"
    status = 404


class TenantMismatch(MemoryStoreError, ValueError):
    """A user who is not a member of the tenant was named."""

    code = "tenant_mismatch"
    status = 400


class SummarizerError(MemoryStoreError):
    """The summarizer could not produce a summary; the core is left as it was."""

    code = "summarizer_failed"
    status = 502


class SummarizerMisconfigured(SummarizerError):
    """``FORGE_MEMORY_SUMMARIZER`` does not name an importable callable."""

    code = "summarizer_misconfigured"
    status = 500


class SummarizerTimeout(SummarizerError):
    code = "summarizer_timeout"
    status = 504


class SummarizerEmpty(SummarizerError):
    """The summarizer returned nothing (not a string, or only white space)."""

    code = "summarizer_empty"
