"""The portal's settings are checked at start, and a refusal names the fix."""

from __future__ import annotations

import pytest

from webagents.errors import ConfigError
from webagents.portal.settings import check_database_url, check_public_url, resolve_settings

HOW = "sqlite:///PATH/portal.db or postgresql+psycopg://USER:PASSWORD@HOST/DATABASE"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            "postgresql+psycopg2://u@db/portal",
            "the portal talks to PostgreSQL through psycopg 3: write postgresql+psycopg://... "
            "instead of postgresql+psycopg2://... (--database or WEBAGENTS_PORTAL_DATABASE_URL)",
        ),
        (
            "sqlite://",
            "the portal database (--database or WEBAGENTS_PORTAL_DATABASE_URL) must be a file, "
            "not an in-memory SQLite database: write sqlite:///PATH/portal.db",
        ),
        (
            "portal.db",
            "the portal database URL (--database or WEBAGENTS_PORTAL_DATABASE_URL) is not a "
            f"URL: write {HOW}",
        ),
    ],
)
def test_p1_database_urls_the_portal_cannot_use_are_refused_naming_the_fix(
    given: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        check_database_url(given)
    assert str(caught.value) == message


def test_p1_plain_postgresql_url_means_psycopg_3() -> None:
    """SQLAlchemy 2.1's default PostgreSQL driver is psycopg 3, the one the portal installs."""
    assert check_database_url("postgresql://u:p@db/portal").get_driver_name() == "psycopg"


def test_p1_database_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBAGENTS_PORTAL_DATABASE_URL", "postgresql+psycopg://u:p@db:5432/portal")
    assert resolve_settings().database_url == "postgresql+psycopg://u:p@db:5432/portal"
    assert resolve_settings("postgresql+psycopg://x@y/z").database_url == (
        "postgresql+psycopg://x@y/z"
    )


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, None),
        ("https://portal.example.com/", "https://portal.example.com"),
        ("http://127.0.0.1:8700", "http://127.0.0.1:8700"),
    ],
)
def test_p2_public_url_is_the_tokens_issuer(given: str | None, expected: str | None) -> None:
    assert check_public_url(given) == expected


@pytest.mark.parametrize("given", ["portal.example.com", "ftp://x", "https://x/?a=1"])
def test_p2_public_url_that_is_no_address_is_refused(given: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_public_url(given)
    assert str(caught.value) == (
        "--public-url (or WEBAGENTS_PORTAL_PUBLIC_URL) must be the address clients use, like "
        f"https://portal.example.com, not {given!r}"
    )
