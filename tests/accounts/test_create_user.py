from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from rest_framework.authtoken.models import Token

from accounts.models import Membership, Tenant, User
from accounts.selectors import tenant_for_user

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("create_user", *args, stdout=out)
    return out.getvalue()


def test_creates_the_tenant_and_a_member_and_prints_the_token_last():
    output = run("carol", "--tenant", "initech", "--password", "a-long-passphrase-42", "--token")
    user = User.objects.get(username="carol")
    assert tenant_for_user(user).name == "initech"
    assert user.check_password("a-long-passphrase-42")
    assert not user.is_staff
    last_line = output.strip().splitlines()[-1]
    assert last_line == Token.objects.get(user=user).key


def test_a_second_user_joins_the_existing_tenant_and_staff_is_optional():
    run("dave", "--tenant", "initech")
    run("erin", "--tenant", "initech", "--staff")
    assert Tenant.objects.filter(name="initech").count() == 1
    assert Membership.objects.filter(tenant__name="initech").count() == 2
    assert User.objects.get(username="erin").is_staff
    assert not User.objects.get(username="dave").has_usable_password()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["frank", "--tenant", "   "], "tenant name must not be empty"),
        (["bad name!", "--tenant", "x"], "Enter a valid username"),
        (["gina", "--tenant", "x", "--password", "123"], "too short"),
        (["u" * 151, "--tenant", "x"], "username is longer than 150 characters"),
        # third-round findings: a tenant named with a control character was made, and
        # an empty password made a user who could never sign in, without a word
        (["hal", "--tenant", "a\x01b"], "must not hold control characters"),
        (["ida", "--tenant", "x", "--password", ""], "--password must not be empty"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not User.objects.exists()
    assert not Tenant.objects.exists()


def test_an_existing_username_is_refused():
    run("hank", "--tenant", "one")
    with pytest.raises(CommandError, match="already exists"):
        run("hank", "--tenant", "two")
    assert not Tenant.objects.filter(name="two").exists()
    # in any case (a third-round finding: "Hank" beside "hank"), as the admin's form
    with pytest.raises(CommandError, match="a user named 'hank' already exists"):
        run("Hank", "--tenant", "two")
    assert User.objects.count() == 1


def test_the_command_exits_nonzero_from_the_shell(tmp_path):
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "manage.py", "create_user", "x y", "--tenant", "t"],
        capture_output=True,
        text=True,
        env={"DJANGO_SETTINGS_MODULE": "forge.settings.test", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 1
    assert "CommandError" in result.stderr or "Enter a valid username" in result.stderr
