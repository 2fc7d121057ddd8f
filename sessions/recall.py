"""Reads for recall: full-text search over a session's whole history (what compaction
and pruning hid from the model included) and reads of messages by id. Like every
selector, each takes the tenant."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from django.db import connection

from accounts.models import Tenant

from .exceptions import InvalidCursor
from .ids import is_valid_id
from .models import Message, Part, Session, SessionEvent
from .selectors import PAGE_MAX, check_limit, with_parts

SEARCH_MAX = 50
_PART_TABLE = Part._meta.db_table
_EVENT_TABLE = SessionEvent._meta.db_table
_FTS_TABLE = f"{_PART_TABLE}_fts"
# The indexed expression of migration 0010 (PostgreSQL's GIN index on the part.updated
# events, ``e`` below): keep both in step. A tool output's first OUTPUT_HEAD_CHARS only:
# a tsvector holds at most 1 MB, and outputs are logged whole (up to 10 MB).
OUTPUT_HEAD_CHARS = 100_000
# The searched text as plain text (a substring match reads it), and as the indexed
# tsvector: keep both in step with migration 0010's expression.
_POSTGRES_TEXT = (
    "coalesce(e.data->>'text', '') || ' ' || coalesce(e.data->>'tool', '') || ' ' || "
    "coalesce(e.data#>>'{state,input}', '') || ' ' || "
    f"left(coalesce(e.data#>>'{{state,output}}', ''), {OUTPUT_HEAD_CHARS}) "
    "|| ' ' || coalesce(e.data#>>'{state,error}', '') || ' ' || "
    "coalesce(e.data->>'filename', '') || ' ' || coalesce(e.data->>'prompt', '')"
)
_POSTGRES_BODY = f"to_tsvector('simple'::regconfig, {_POSTGRES_TEXT})"
_SQLITE_TEXT_VIEW = f"{_FTS_TABLE}_content"  # migration 0006: each part's indexed body
_WORD = re.compile(r"\w+", re.UNICODE)


def _accent_table() -> tuple[str, str]:
    """Latin letters with diacritics (U+00C0-U+024F) and the plain lower-case letter of
    each: PostgreSQL's ``translate`` folds with them as SQLite's ``unicode61``
    tokenizer folds (``remove_diacritics``), with no extension (``unaccent``) needed."""
    accented, plain = [], []
    for code in range(0xC0, 0x250):
        char = chr(code)
        base = unicodedata.normalize("NFKD", char)[0]
        if base != char and base.isascii() and base.isalpha():
            accented.append(char)
            plain.append(base.lower())
    return "".join(accented), "".join(plain)


_ACCENTED, _PLAIN = _accent_table()
_UNACCENT = str.maketrans(_ACCENTED, _PLAIN)


def _folded(text: str) -> str:
    """``text`` lower-cased, its accents folded as :data:`_ACCENTED` says."""
    return text.lower().translate(_UNACCENT)


SQLITE_FOLD = "forge_recall_fold"  # _folded, on SQLite (whose lower() folds ASCII only)


def register_sqlite_fold(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created``: :data:`SQLITE_FOLD` on each new SQLite connection."""
    if connection.vendor == "sqlite":
        connection.connection.create_function(
            SQLITE_FOLD,
            1,
            lambda value: _folded(value) if isinstance(value, str) else value,
            deterministic=True,
        )


# Scripts written without spaces between words (Chinese, Japanese), or with particles
# joined to them (Korean): the index holds a whole run as one token.
_UNSPACED = re.compile(
    "[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f]"
)


@dataclass(frozen=True)
class SearchHit:
    message_id: str
    part_id: str
    role: str
    snippet: str
    rank: int  # 1 = best; a position, never a score


def search_history(
    *, tenant: Tenant, session: Session, query: str, limit: int = 10, skip: str = ""
) -> list[SearchHit]:
    """Full-text search over every part of the session (whatever compaction or pruning
    hid from the model), best first, ranked 1, 2, 3 …: SQLite FTS5 or PostgreSQL
    full text (a GIN-indexed tsvector). Every word of ``query`` must match.

    The order is a measure of each part alone, then the newest first: on SQLite how
    many of its words match (FTS5's bm25 is not used: its word statistics span the
    whole index, every tenant's parts, so the order would move when another tenant
    wrote; issue 17), on PostgreSQL ``ts_rank`` (per document already). Hits carry
    their rank, never a score. A query holding a word in Chinese, Japanese or Korean
    script matches every word as a substring instead (:func:`_scan`), newest first.

    A part's text lives in its event only (migration 0006): both engines search the
    current event of each of the session's parts. ``skip``: a message left out (the
    reply whose tool call searches: its own call, holding the query, was its first hit)."""
    check_limit(limit, SEARCH_MAX)
    if not (query or "").strip():
        raise InvalidCursor("query: give at least one word to search for")
    words = _WORD.findall(query)[:20]
    if not words:
        return []  # only emoji or punctuation: nothing to find, as memory search says
    # Table names come from the models; every value is a bound parameter.
    ranked: list[Any] | None = None
    with connection.cursor() as cursor:
        if any(_UNSPACED.search(word) for word in words):
            _scan(cursor, session=session, words=words, limit=limit, skip=skip)
        elif connection.vendor == "postgresql":
            cursor.execute(
                f"SELECT p.message_id, p.id, ts_rank({_POSTGRES_BODY}, q) AS rank, "  # noqa: S608
                "left(coalesce(e.data->>'text', e.data#>>'{state,output}', e.data->>'tool', ''),"
                f" 2000) FROM {_PART_TABLE} p JOIN {_EVENT_TABLE} e "
                "ON e.session_id = p.session_id AND e.seq = p.seq, "
                "plainto_tsquery('simple'::regconfig, %s) q "
                "WHERE p.tenant_id = %s AND p.session_id = %s AND e.type = 'part.updated' "
                f"AND p.message_id <> %s AND {_POSTGRES_BODY} @@ q "
                "ORDER BY rank DESC, p.id DESC LIMIT %s",
                [" ".join(words), tenant.pk, session.pk, skip, limit],
            )
            ranked = cursor.fetchall()
            if len(ranked) < limit:  # accents: the index keeps them (see _scan)
                _scan(cursor, session=session, words=words, limit=limit, skip=skip)
                found = {row[1] for row in ranked}
                more = [row for row in cursor.fetchall() if row[1] not in found]
                ranked += more[: limit - len(ranked)]
        else:
            match = " ".join('"' + word.replace('"', "") + '"' for word in words)
            marked = f"highlight({_FTS_TABLE}, 0, char(1), '')"  # a mark per matching word
            cursor.execute(
                f"SELECT p.message_id, p.id, "  # noqa: S608
                f"length({marked}) - length(replace({marked}, char(1), '')) AS rank, "
                f"{_FTS_TABLE}.body FROM {_FTS_TABLE} "
                f"JOIN {_PART_TABLE} p ON p.rowid = {_FTS_TABLE}.rowid "
                f"WHERE {_FTS_TABLE} MATCH %s AND p.session_id = %s AND p.message_id <> %s "
                "ORDER BY rank DESC, p.id DESC LIMIT %s",
                [match, session.pk, skip, limit],
            )
        rows = ranked if ranked is not None else cursor.fetchall()
    roles = dict(
        Message.objects.filter(
            tenant=tenant, session=session, id__in={row[0] for row in rows}
        ).values_list("id", "role")
    )
    kept = [row for row in rows if row[0] in roles]
    return [
        SearchHit(
            message_id=message_id,
            part_id=part_id,
            role=roles[message_id],
            snippet=_focus(str(text or ""), words),
            rank=rank,
        )
        for rank, (message_id, part_id, _measure, text) in enumerate(kept, 1)
    ]


def _scan(cursor: Any, *, session: Session, words: list[str], limit: int, skip: str) -> None:
    """The session's parts holding every word as a substring (case folded), newest
    first: a query with a word in a script the index cannot cut (``_UNSPACED``), so that
    ``咖啡`` finds ``我昨天喝了咖啡``. It reads the session's parts, not an index: the
    search is one session's, and each row's measure is the same (every word is in it).

    On PostgreSQL it also fills what the full-text index left of ``limit``, accents
    folded on both sides (:func:`_folded`): ``to_tsvector('simple', …)`` keeps them, so
    ``cafe`` did not find ``café`` there (SQLite's index folds them), and run only when
    the index found nothing, one message saying "cafe" hid every "Café" (QA)."""
    folded = [_folded(word) for word in words]
    if connection.vendor == "postgresql":
        text = f"translate(lower({_POSTGRES_TEXT}), %s, %s)"
        held = " AND ".join(f"strpos({text}, %s) > 0" for _ in folded)
        cursor.execute(
            f"SELECT p.message_id, p.id, 0, "  # noqa: S608
            "left(coalesce(e.data->>'text', e.data#>>'{state,output}', e.data->>'tool', ''),"
            f" 2000) FROM {_PART_TABLE} p JOIN {_EVENT_TABLE} e "
            "ON e.session_id = p.session_id AND e.seq = p.seq "
            "WHERE p.tenant_id = %s AND p.session_id = %s AND e.type = 'part.updated' "
            f"AND p.message_id <> %s AND {held} ORDER BY p.id DESC LIMIT %s",
            [
                session.tenant_id,
                session.pk,
                skip,
                *(value for word in folded for value in (_ACCENTED, _PLAIN, word)),
                limit,
            ],
        )
    else:  # SQLite's lower() folds ASCII only, and no accents: Python's, as above (QA)
        held = " AND ".join(f"instr({SQLITE_FOLD}(v.body), %s) > 0" for _ in folded)
        cursor.execute(
            f"SELECT p.message_id, p.id, 0, v.body FROM {_PART_TABLE} p "  # noqa: S608
            f"JOIN {_SQLITE_TEXT_VIEW} v ON v.rowid = p.rowid "
            f"WHERE p.tenant_id = %s AND p.session_id = %s AND p.message_id <> %s AND {held} "
            "ORDER BY p.id DESC LIMIT %s",
            [session.tenant_id, session.pk, skip, *folded, limit],
        )


def _focus(text: str, words: list[str], width: int = 300) -> str:
    """About ``width`` characters of ``text`` around the first matching word."""
    text = " ".join(text.split())
    lowered = _folded(text)
    at = min((i for w in words if (i := lowered.find(_folded(w))) >= 0), default=0)
    start = max(at - width // 3, 0)
    piece = text[start : start + width]
    return ("…" if start else "") + piece + ("…" if start + width < len(text) else "")


def read_messages(
    *,
    tenant: Tenant,
    session: Session,
    ids: list[str] | None = None,
    start: str | None = None,
    end: str | None = None,
    limit: int = 20,
) -> list[dict[str, Any]]:
    """Messages of the session with their parts, oldest first: by id, or the id range
    ``start``..``end`` (inclusive), at most ``limit``."""
    check_limit(limit, PAGE_MAX)
    messages = Message.objects.filter(tenant=tenant, session=session)
    if ids is not None:
        bad = [i for i in ids if not is_valid_id(i)]
        if bad:
            raise InvalidCursor(f"ids: {bad[0]!r} is not a message id")
        messages = messages.filter(id__in=ids)
    else:
        if start is None:
            raise InvalidCursor("give message ids, or a start id (and an end id)")
        for name, value in (("start", start), ("end", end)):
            if value is not None and not is_valid_id(value):
                raise InvalidCursor(f"{name}: {value!r} is not a message id")
        messages = messages.filter(id__gte=start)
        if end is not None:
            messages = messages.filter(id__lte=end)
    rows = list(messages.order_by("id").values_list("id", "data")[:limit])
    return with_parts(tenant, session, rows)


def message_of_part(*, tenant: Tenant, session: Session, part_id: str) -> str | None:
    if not is_valid_id(part_id):
        return None
    return (
        Part.objects.filter(tenant=tenant, session=session, pk=part_id)
        .values_list("message_id", flat=True)
        .first()
    )
