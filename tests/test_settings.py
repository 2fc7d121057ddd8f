"""Settings come from the environment, once; production refuses to start half-configured."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from forge.settings.base import channel_layers, database_config

ROOT = Path(__file__).resolve().parent.parent
REAL_KEY = "k3y-" + "x1y2z3" * 12


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("FORGE_", "DJANGO_"))}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_production_refuses_to_start_without_a_secret_key():
    result = manage(
        "check",
        DJANGO_SETTINGS_MODULE="forge.settings.production",
        FORGE_ALLOWED_HOSTS="forge.example.com",
    )
    assert result.returncode != 0
    assert "FORGE_SECRET_KEY must be set" in result.stderr


def test_production_refuses_a_development_key_and_missing_hosts():
    dev_key = manage(
        "check",
        DJANGO_SETTINGS_MODULE="forge.settings.production",
        FORGE_SECRET_KEY="dev-insecure-" + "a1b2c3" * 10,
        FORGE_ALLOWED_HOSTS="forge.example.com",
    )
    assert "development key" in dev_key.stderr
    no_hosts = manage(
        "check", DJANGO_SETTINGS_MODULE="forge.settings.production", FORGE_SECRET_KEY=REAL_KEY
    )
    assert "FORGE_ALLOWED_HOSTS" in no_hosts.stderr


def test_production_passes_the_deploy_check_when_configured(tmp_path):
    configured = {
        "DJANGO_SETTINGS_MODULE": "forge.settings.production",
        "FORGE_SECRET_KEY": REAL_KEY,
        "FORGE_ALLOWED_HOSTS": "forge.example.com",
        "FORGE_STATIC_ROOT": str(tmp_path / "static"),
    }
    collected = manage("collectstatic", "--noinput", "--verbosity", "0", **configured)
    assert collected.returncode == 0, collected.stderr
    result = manage("check", "--deploy", "--fail-level", "WARNING", **configured)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_sqlite_urls_get_wal_a_busy_timeout_and_immediate_transactions():
    config = database_config("sqlite:////tmp/x.sqlite3")
    assert "journal_mode=WAL" in config["OPTIONS"]["init_command"]
    assert config["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert config["OPTIONS"]["timeout"] >= 5
    assert config["ENGINE"] == "forge.db.sqlite3"
    # Django's backend plus the application role of row-level security:
    assert database_config("postgres://u@h:5432/d")["ENGINE"] == "forge.db.postgresql"


def test_postgresql_gets_a_connection_pool_per_process(monkeypatch):
    assert database_config("postgres://u@h:5432/d")["OPTIONS"]["pool"]["max_size"] == 8
    monkeypatch.setenv("FORGE_DB_POOL", "3")
    assert database_config("postgres://u@h:5432/d")["OPTIONS"]["pool"]["max_size"] == 3
    monkeypatch.setenv("FORGE_DB_POOL", "0")
    assert "pool" not in database_config("postgres://u@h:5432/d").get("OPTIONS", {})
    assert "pool" not in database_config("postgres://u@h:5432/d", pool=0).get("OPTIONS", {})
    assert "pool" not in database_config("sqlite:////tmp/x.sqlite3")["OPTIONS"]


def test_redis_url_switches_the_channel_layer():
    assert channel_layers("")["default"]["BACKEND"] == "forge.inmemory.InMemoryChannelLayer"
    pubsub = channel_layers("redis://127.0.0.1:6379/0", layer="pubsub")["default"]
    assert pubsub["BACKEND"] == "forge.pubsub.PubSubChannelLayer"
    assert pubsub["CONFIG"]["hosts"][0]["address"] == "redis://127.0.0.1:6379/0"
    redis = channel_layers("redis://127.0.0.1:6379/0", layer="core")["default"]
    assert redis["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    (host,) = redis["CONFIG"]["hosts"]
    assert host["address"] == "redis://127.0.0.1:6379/0"
    # Longer than channels-redis's 5 s blocking wait, or an idle receive can time out.
    from channels_redis.core import RedisChannelLayer

    assert host["socket_timeout"] > RedisChannelLayer.brpop_timeout


@pytest.mark.sqlite_only
@pytest.mark.django_db
def test_the_embedded_stack_really_is_sqlite_in_wal_mode():
    assert connection.vendor == "sqlite"
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"].endswith("InMemoryChannelLayer")


@pytest.mark.postgres_only
@pytest.mark.django_db
def test_the_server_stack_really_is_postgresql_and_redis():
    assert connection.vendor == "postgresql"
    assert (
        settings.CHANNEL_LAYERS["default"]["BACKEND"]
        == {
            "pubsub": "forge.pubsub.PubSubChannelLayer",
            "core": "channels_redis.core.RedisChannelLayer",
        }[settings.FORGE_CHANNEL_LAYER]
    )
