"""Long-term memory over HTTP (CONTRACT §2, §3): read-only, tenant-scoped, paged."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from memory import search, services
from memory.models import MemoryCore, MemorySlice, MemoryUnit

from .conftest import error

pytestmark = pytest.mark.django_db


def remember(tenant: Any, user: Any, agent: str, *texts: str) -> MemoryCore:
    """One exchange per text, then a rolling: a unit and a slice summarizing them."""
    core = None
    for text in texts:
        core = services.append_dialogue(
            tenant=tenant,
            user=user,
            agent=agent,
            messages=[
                {"role": "user", "text": f"{text}."},
                {"role": "assistant", "text": f"Noted about {text}."},
            ],
        )
    assert core is not None
    services.roll_core(tenant=tenant, core=core, keep=0)  # all of it: none kept unrolled
    search.index_pending()
    core.refresh_from_db()
    return core


@pytest.fixture
def mine(tenant: Any, user: Any) -> MemoryCore:
    return remember(tenant, user, "build", "We deployed the rocket service", "Coffee with oat milk")


@pytest.fixture
def theirs(other_user: Any) -> MemoryCore:
    other_tenant = other_user.tenants.get()
    return remember(other_tenant, other_user, "build", "Secret rocket deployment plans")


def unit_of(core: MemoryCore) -> MemoryUnit:
    return MemoryUnit.objects.get(core=core)


# --- cores ----------------------------------------------------------------------------------


def test_cores_list_the_callers_tenant_in_the_wire_shape(api, mine, theirs):
    body = api.get("/api/memory/cores/").json()
    assert set(body) == {"results", "next", "previous"}
    assert body["next"] is None
    assert body["previous"] is None
    assert body["results"] == [
        {
            "id": mine.pk,
            "user": "alice",
            "agent": "build",
            "memory_session_id": mine.memory_session_id,
            "units": [unit_of(mine).pk],
        }
    ]


def test_one_core_and_the_agent_filter(api, tenant, user, mine):
    other = remember(tenant, user, "explore", "Looking around the repository")
    assert api.get(f"/api/memory/cores/{mine.pk}/").json()["units"] == [unit_of(mine).pk]
    only = api.get("/api/memory/cores/?agent=explore").json()["results"]
    assert [c["id"] for c in only] == [other.pk]
    assert api.get("/api/memory/cores/?agent=nobody").json()["results"] == []
    assert api.get("/api/memory/cores/?agent=").json()["results"] != []


def test_cores_are_paged_with_a_cursor(api, tenant, user):
    created = [
        services.append_dialogue(
            tenant=tenant, user=user, agent=f"agent{i}", messages=[{"role": "user", "text": "hi"}]
        )
        for i in range(5)
    ]
    seen: list[str] = []
    url: str | None = "/api/memory/cores/?limit=2"
    pages = 0
    while url:
        body = api.get(url).json()
        assert len(body["results"]) <= 2
        seen += [c["id"] for c in body["results"]]
        url = body["next"]
        pages += 1
    assert pages == 3
    assert seen == sorted((c.pk for c in created), reverse=True)  # newest first
    assert all(c["units"] == [] for c in api.get("/api/memory/cores/").json()["results"])


def test_a_core_list_costs_the_same_queries_whatever_its_size(
    api, tenant, user, django_assert_max_num_queries
):
    for i in range(20):
        remember(tenant, user, f"agent{i}", f"Topic {i}")
    with django_assert_max_num_queries(8):
        assert len(api.get("/api/memory/cores/").json()["results"]) == 20


# --- units ----------------------------------------------------------------------------------


def test_a_unit_with_its_messages_and_slices(api, mine):
    unit = unit_of(mine)
    body = api.get(f"/api/memory/units/{unit.pk}/").json()
    assert {"id", "memory_session_id", "updated_at", "conversation_messages", "slices"} <= set(body)
    assert body["id"] == unit.pk
    assert body["message_count"] == 4
    assert body["offset"] == 0
    assert body["next"] is None
    assert [m["role"] for m in body["conversation_messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert set(body["conversation_messages"][0]) == {"role", "text", "at"}
    assert body["conversation_messages"][0]["text"] == "We deployed the rocket service."
    [item] = body["slices"]
    assert set(item) == {"id", "start_index", "end_index", "summary", "created_at"}
    assert (item["start_index"], item["end_index"]) == (0, 4)


def test_a_large_units_messages_are_paged_with_offset_and_limit(api, tenant, user):
    core = remember(tenant, user, "build", *[f"Fact number {i}" for i in range(7)])
    unit = unit_of(core)
    texts: list[str] = []
    url: str | None = f"/api/memory/units/{unit.pk}/?limit=3"
    offsets = []
    while url:
        body = api.get(url).json()
        offsets.append(body["offset"])
        assert body["message_count"] == 14
        assert len(body["slices"]) == 1  # slices always whole, indexes over the whole unit
        texts += [m["text"] for m in body["conversation_messages"]]
        url = body["next"]
    assert offsets == [0, 3, 6, 9, 12]
    assert texts[::2] == [f"Fact number {i}." for i in range(7)]
    past = api.get(f"/api/memory/units/{unit.pk}/?offset=500").json()
    assert past["conversation_messages"] == []
    assert past["next"] is None
    huge = api.get(f"/api/memory/units/{unit.pk}/?offset=999999999999999999")
    assert huge.status_code == 200
    assert huge.json()["conversation_messages"] == []


# --- search ---------------------------------------------------------------------------------


def test_search_ranks_hits_and_gives_their_unit(api, tenant, user, mine):
    remember(tenant, user, "explore", "Rocket engines and rocket fuel")
    body = api.get("/api/memory/search/?q=rocket").json()
    assert set(body) == {"results", "next", "previous"}
    assert body["next"] is None
    hits = body["results"]
    assert len(hits) == 2
    assert set(hits[0]) == {"slice", "unit_id", "core_id", "agent", "rank", "matched", "messages"}
    assert {h["matched"] for h in hits} == {"words"}
    for hit in hits:
        assert hit["messages"], hit
        for message in hit["messages"]:
            assert set(message) == {"index", "role", "at", "snippet"}
            assert hit["slice"]["start_index"] <= message["index"] < hit["slice"]["end_index"]
    assert [h["rank"] for h in hits] == [1, 2]
    assert {h["agent"] for h in hits} == {"build", "explore"}
    mine_hit = next(h for h in hits if h["agent"] == "build")
    assert mine_hit["unit_id"] == unit_of(mine).pk
    assert mine_hit["core_id"] == mine.pk
    assert mine_hit["slice"]["id"] == MemorySlice.objects.get(unit__core=mine).pk
    only = api.get("/api/memory/search/?q=rocket&agent=explore").json()["results"]
    assert [h["agent"] for h in only] == ["explore"]
    assert len(api.get("/api/memory/search/?q=rocket&limit=1").json()["results"]) == 1


HOSTILE = [
    '"',
    '"unbalanced',
    "*",
    "rocket*",
    "NEAR(rocket coffee)",
    "rocket OR",
    "OR AND NOT",
    "((rocket",
    "rocket)",
    "summary : rocket",
    "scope:t1",
    "'; DROP TABLE memory_memoryslice; --",
    "rocket \\ / | & ! : < > @ @@ ~ ^ -",
    "",
    "   ",
    "ü" * 1000,
]


@pytest.mark.parametrize("query", HOSTILE)
def test_query_syntax_is_plain_text_never_a_500(api, mine, query, settings):
    # Full text only: the query's syntax is what is tested (a vector would find the
    # nearest slice by meaning for any query, "DROP TABLE" included).
    settings.FORGE_MEMORY_VECTORS = False
    response = api.get("/api/memory/search/", {"q": query})
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    if "rocket" in query:
        assert [h["core_id"] for h in results] == [mine.pk]
    else:
        assert results == []


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("/api/memory/search/", "invalid_query"),
        ("/api/memory/search/?q=" + "a" * 1001, "invalid_query"),
        ("/api/memory/search/?q=x&limit=0", "invalid_query"),
        ("/api/memory/search/?q=x&limit=101", "invalid_query"),
        ("/api/memory/search/?q=x&limit=-1", "invalid_query"),
        ("/api/memory/search/?q=x&limit=ten", "invalid_query"),
        ("/api/memory/search/?q=x&limit=%D9%A3", "invalid_query"),  # Arabic-Indic 3
        ("/api/memory/search/?q=x&limit=%EF%BC%95", "invalid_query"),  # fullwidth 5
        ("/api/memory/search/?q=x&agent=" + "a" * 65, "invalid_query"),
        ("/api/memory/search/?q=x&agent=a%00b", "invalid"),  # a NUL anywhere: forge/nul.py
        ("/api/memory/search/?q=%00rocket", "invalid"),
        ("/api/memory/cores/?limit=0", "invalid_cursor"),
        ("/api/memory/cores/?limit=201", "invalid_cursor"),
        ("/api/memory/cores/?limit=%D9%A3", "invalid_cursor"),
        ("/api/memory/cores/?cursor=bogus", "invalid_cursor"),
        ("/api/memory/cores/?agent=a%00b", "invalid"),
        # QA (LOW): trimmed, a newline was no filter at all and " build" matched build.
        ("/api/memory/cores/?agent=%0a", "invalid_query"),
        ("/api/memory/cores/?agent=%20build", "invalid_query"),
        ("/api/memory/search/?q=x&agent=build%09", "invalid_query"),
        ("/api/memory/units/{unit}/?limit=1001", "invalid_query"),
        ("/api/memory/units/{unit}/?offset=-1", "invalid_query"),
        ("/api/memory/units/{unit}/?offset=%D9%A3", "invalid_query"),
        ("/api/memory/units/{unit}/?offset=9999999999999999999", "invalid_query"),
    ],
)
def test_bad_input_is_a_400_with_a_json_error(api, mine, url, code):
    response = api.get(url.format(unit=unit_of(mine).pk))
    assert response.status_code == 400, response.content
    assert error(response)["code"] == code


# A unit's page and a search have no cursor: a bad ``limit`` or ``offset`` there was
# ``invalid_cursor``, which names nothing the client sent. It is ``invalid_query`` (the
# memory API's code for a bad query parameter) and the message names the parameter. The
# core list is paged with a cursor, so its ``limit`` stays ``invalid_cursor`` as every
# cursor list's (test above).
@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("/api/memory/units/{unit}/?limit=abc", "limit"),
        ("/api/memory/units/{unit}/?limit=-1", "limit"),
        ("/api/memory/units/{unit}/?limit=0", "limit"),
        ("/api/memory/units/{unit}/?offset=x", "offset"),
        ("/api/memory/units/{unit}/?offset=%201", "offset"),
        ("/api/memory/search/?q=x&limit=abc", "limit"),
        ("/api/memory/search/?q=x&limit=1e3", "limit"),
    ],
)
def test_a_bad_limit_or_offset_without_a_cursor_is_invalid_query_naming_it(api, mine, url, name):
    response = api.get(url.format(unit=unit_of(mine).pk))
    assert response.status_code == 400, response.content
    body = error(response)
    assert body["code"] == "invalid_query"
    assert body["message"].startswith(f"{name} must be"), body


@pytest.mark.parametrize("limit", ["-1", "abc", "%EF%BC%95", "0"])
@pytest.mark.parametrize(
    ("url", "maximum"), [("/api/memory/units/{unit}/?", 1000), ("/api/memory/search/?q=x&", 100)]
)
def test_a_bad_limit_says_the_range_it_takes(api, mine, url, maximum, limit):
    """QA (LOW): ``limit=-1`` was answered "limit must be a non-negative integer", and
    the client that then sent ``limit=0`` was told "limit must be from 1 to …": the
    first answer named a range the parameter does not take."""
    response = api.get(url.format(unit=unit_of(mine).pk) + "limit=" + limit)
    assert response.status_code == 400, response.content
    assert f"limit must be an integer from 1 to {maximum}" in error(response)["message"]


# --- isolation, methods, auth -----------------------------------------------------------------


def test_another_tenant_gets_404_on_every_object_route_and_nothing_from_lists(
    api, stranger, mine, theirs
):
    unit = unit_of(mine)
    for url in (f"/api/memory/cores/{mine.pk}/", f"/api/memory/units/{unit.pk}/"):
        response = stranger.get(url)
        assert response.status_code == 404, url
        missing = stranger.get(url.replace(mine.pk, "mco_missing").replace(unit.pk, "mun_missing"))
        assert missing.status_code == 404
        assert error(response)["code"] == error(missing)["code"] == "not_found"
    assert [c["id"] for c in stranger.get("/api/memory/cores/").json()["results"]] == [theirs.pk]
    assert [c["id"] for c in api.get("/api/memory/cores/").json()["results"]] == [mine.pk]

    # "rocket" is in both tenants' memory: each sees only its own.
    def found(client: APIClient, query: str) -> set[str]:
        return {
            h["core_id"] for h in client.get("/api/memory/search/", {"q": query}).json()["results"]
        }

    assert found(stranger, "rocket") == {theirs.pk}
    assert found(api, "rocket") == {mine.pk}
    assert stranger.get("/api/memory/search/?q=coffee").json()["results"] == []
    assert stranger.get(f"/api/memory/search/?q=coffee&agent={mine.agent}").json()["results"] == []


def test_unknown_and_malformed_ids_are_404(api):
    for url in (
        "/api/memory/cores/mco_nope/",
        "/api/memory/units/mun_nope/",
        "/api/memory/units/not%20an%20id/",
        "/api/memory/units/" + "x" * 300 + "/",
    ):
        response = api.get(url)
        assert response.status_code == 404, url
        assert error(response)["code"] == "not_found"


def test_memory_is_read_only(api, mine):
    unit = unit_of(mine)
    for url in (
        "/api/memory/cores/",
        f"/api/memory/cores/{mine.pk}/",
        f"/api/memory/units/{unit.pk}/",
        "/api/memory/search/?q=rocket",
    ):
        for method in ("post", "put", "patch", "delete"):
            response = getattr(api, method)(url, {}, format="json")
            assert response.status_code == 405, (method, url)
            assert error(response)["code"] == "method_not_allowed"
    assert MemoryCore.objects.filter(pk=mine.pk).exists()


def test_memory_needs_credentials(mine):
    anonymous = APIClient()
    for url in (
        "/api/memory/cores/",
        f"/api/memory/cores/{mine.pk}/",
        f"/api/memory/units/{unit_of(mine).pk}/",
        "/api/memory/search/?q=rocket",
    ):
        response = anonymous.get(url)
        assert response.status_code == 401
        assert error(response)["code"] == "not_authenticated"


def test_the_openapi_schema_documents_memory_without_warnings(api):
    schema = api.get("/api/schema/")
    assert schema.status_code == 200
    for path in (
        b"/api/memory/cores/",
        b"/api/memory/cores/{id}/",
        b"/api/memory/units/{id}/",
        b"/api/memory/search/",
    ):
        assert path in schema.content
    out = StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    assert "PaginatedMemoryCoreList" in out.getvalue()


def test_another_members_memory_is_theirs_and_staff_see_the_tenants(api, tenant, mine):
    """A third-round finding (HIGH): a member of the tenant listed another member's
    cores and read their units' raw messages (search and the tools were already the
    speaker's own). Another member's core or unit is a 404 now; staff, who browse the
    tenant's memory as operators, still see it."""
    from accounts.models import Membership
    from accounts.services import create_user

    bob = create_user(username="bob", tenant_name=tenant.name, with_token=True)
    assert Membership.objects.filter(user=bob.user, tenant=tenant).exists()
    member = APIClient()
    member.credentials(HTTP_AUTHORIZATION=f"Token {bob.token}")
    assert member.get("/api/memory/cores/").json()["results"] == []
    for path in (f"/api/memory/cores/{mine.pk}/", f"/api/memory/units/{unit_of(mine).pk}/"):
        response = member.get(path)
        assert response.status_code == 404
        assert error(response)["code"] == "not_found"
    assert api.get(f"/api/memory/units/{unit_of(mine).pk}/").status_code == 200  # the owner

    # Staff alone read every member's raw dialogue (QA): staff who may view memory do.
    bob.user.is_staff = True
    bob.user.save(update_fields=["is_staff"])
    assert member.get("/api/memory/cores/").json()["results"] == []
    assert member.get(f"/api/memory/units/{unit_of(mine).pk}/").status_code == 404
    from django.contrib.auth.models import Permission

    bob.user.user_permissions.add(Permission.objects.get(codename="view_memorycore"))
    assert [c["id"] for c in member.get("/api/memory/cores/").json()["results"]] == [mine.pk]
    assert member.get(f"/api/memory/units/{unit_of(mine).pk}/").status_code == 200
