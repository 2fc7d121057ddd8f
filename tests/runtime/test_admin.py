import pytest
from django.urls import reverse

from forge.models import Agent

pytestmark = pytest.mark.django_db


@pytest.fixture
def build():
    return Agent.objects.update_or_create(name="build", defaults={"is_default": True})[0]


def test_agents_are_editable_in_the_admin_with_their_tools(admin_client, build):
    url = reverse("admin:forge_agent_change", args=[build.pk])
    page = admin_client.get(url)
    assert page.status_code == 200
    assert 'value="read_file"' in page.text
    assert 'value="task"' in page.text
    response = admin_client.post(
        url,
        {
            "name": "build",
            "description": "d",
            "system_prompt": "Be brief.",
            "model": "offline/echo",
            "tools": ["read_file", "list_files"],
            "step_limit": 5,
            "temperature": "0.2",
            "is_default": "on",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    build.refresh_from_db()
    assert (build.tools, build.step_limit, build.system_prompt) == (
        ["read_file", "list_files"],
        5,
        "Be brief.",
    )


def test_an_agent_name_must_be_a_slug(admin_client):
    response = admin_client.post(
        reverse("admin:forge_agent_add"), {"name": "Bad Name", "step_limit": 3, "tools": []}
    )
    assert response.status_code == 200
    assert "lower-case letters" in response.text
    assert not Agent.objects.filter(name="Bad Name").exists()
