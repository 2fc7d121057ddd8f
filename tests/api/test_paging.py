"""Cursor-paged lists refuse a bad cursor or limit with 400 ``invalid_cursor``, like every
other route (issue 17, LOW: a cursor whose position is no date was a 500, and
``?limit=0``, a negative or a huge limit a silent 200 with the default page)."""

from __future__ import annotations

import base64

import pytest

from sessions import services

from .conftest import error

pytestmark = pytest.mark.django_db


def cursor(raw: str) -> str:
    return base64.b64encode(raw.encode()).decode()


NUL_POSITION = "cursor=" + cursor("p=\x00")


BAD = [
    "cursor=cD1ub3RhZGF0ZQ==",  # p=notadate: the issue's
    f"cursor={cursor('p=2026-13-45 99:00:00+00:00')}",
    NUL_POSITION,
    f"cursor={cursor('o=-5')}",
    f"cursor={cursor('r=yes')}",
    "cursor=%C2%B2",
    "cursor=not-base64!",
    # QA: DRF's lenient base64 read these as the first page, and a far offset as a page
    "cursor=!!!!",
    f"cursor={cursor('o=10000000')}",
    f"cursor={cursor('x=1')}",
    f"cursor={cursor('o=1&o=2')}",
    # QA: a date past the last one once in UTC was a 500 (OverflowError)
    f"cursor={cursor('p=9999-12-31T23:59:59-23:00')}",
    f"cursor={cursor('p=0001-01-01T00:00:00+23:00&r=1')}",
    "limit=0",
    "limit=-1",
    "limit=201",
    f"limit={10**30}",
    "limit=ten",
]


@pytest.mark.parametrize("query", BAD)
def test_a_bad_cursor_or_limit_on_the_session_list_is_400(api, session, query):
    response = api.get(f"/api/sessions/?{query}")
    assert response.status_code == 400, response.content
    assert error(response)["code"] == "invalid_cursor"


@pytest.mark.parametrize("query", [NUL_POSITION, "cursor=nope", "limit=0"])
def test_a_bad_cursor_on_the_memory_core_list_is_400(api, query):
    """The same paging class: a NUL in the position reached PostgreSQL there too."""
    response = api.get(f"/api/memory/cores/?{query}")
    assert response.status_code == 400, response.content
    assert error(response)["code"] == "invalid_cursor"


def test_good_cursors_and_limits_still_page(api, user):
    for n in range(5):
        services.create_session(user=user, title=f"s{n}")
    first = api.get("/api/sessions/?limit=2").json()
    assert [s["title"] for s in first["results"]] == ["s4", "s3"]
    second = api.get(first["next"]).json()
    assert [s["title"] for s in second["results"]] == ["s2", "s1"]
    back = api.get(second["previous"]).json()
    assert [s["title"] for s in back["results"]] == ["s4", "s3"]
    assert len(api.get("/api/sessions/?limit=200").json()["results"]) == 5
    assert len(api.get("/api/sessions/").json()["results"]) == 5
    assert len(api.get("/api/sessions/?cursor=").json()["results"]) == 5  # empty: none
