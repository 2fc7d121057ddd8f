"""Chat aliases (issue 17): the id a client chose for a chat is unique within its tenant
only, and a chat id resolves in the caller's tenant alone, a session's own id first."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from accounts.selectors import tenant_for_user
from sessions import selectors, services
from sessions.exceptions import InvalidEvent, NotFound

pytestmark = pytest.mark.django_db


def test_an_alias_is_unique_within_a_tenant_and_free_in_every_other(user, other_user):
    mine = services.create_session(user=user, chat_alias="myChat")
    assert mine.pk != "myChat"
    with pytest.raises(IntegrityError), transaction.atomic():
        services.create_session(user=user, chat_alias="myChat")
    theirs = services.create_session(user=other_user, chat_alias="myChat")
    assert theirs.tenant_id != mine.tenant_id
    with pytest.raises(InvalidEvent):
        services.create_session(user=user, chat_alias="no/slashes")


def test_a_chat_id_resolves_in_the_callers_tenant_its_own_id_first(user, other_user):
    tenant, other = tenant_for_user(user), tenant_for_user(other_user)
    aliased = services.create_session(user=user, chat_alias="chat1")
    assert selectors.get_chat_session(tenant=tenant, chat_id="chat1") == aliased
    assert selectors.get_chat_session(tenant=tenant, chat_id=aliased.pk) == aliased
    # A session whose own id is another session's alias: the id wins.
    named = services.create_session(user=user, chat_alias=aliased.pk)
    assert selectors.get_chat_session(tenant=tenant, chat_id=aliased.pk) == aliased
    assert selectors.get_chat_session(tenant=tenant, chat_id=named.pk) == named
    for chat_id in ("chat1", aliased.pk, "nothing", "bad id", "\x00"):
        with pytest.raises(NotFound):
            selectors.get_chat_session(tenant=other, chat_id=chat_id)
