"""Hardening of the portal's sign-ins and tokens (issue 11, review findings 2, 3, 4, 7): the
sign-in limit holds under concurrency, tokens die with the API key they came from, agent
tokens are short-lived, and X-Forwarded-For is believed only from proxies the operator names.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from .conftest import csrf_of
from .processes import Served

PROXY_CLIENT = "203.0.113.7"


def _wrong_sign_ins(url: str, forwarded_for: list[str]) -> list[int]:
    """One wrong sign-in per entry, each for a different (unknown) username, so that only the
    per-address limit (20) can answer 429; the statuses."""
    statuses = []
    with httpx.Client(base_url=url) as http:
        token = csrf_of(http.get("/signin").text)
        for number, address in enumerate(forwarded_for):
            answer = http.post(
                "/signin",
                data={"csrf_token": token, "username": f"user{number}", "password": "guess"},
                headers={"X-Forwarded-For": address},
            )
            statuses.append(answer.status_code)
    return statuses


def test_hardening_forwarded_for_is_not_believed_by_default_p1(
    tmp_path: Path, fresh_database_url: str
) -> None:
    """A local client naming a new address in each X-Forwarded-For is still counted as
    itself: the 21st failure from it is refused."""
    served = Served(tmp_path, "--database", fresh_database_url)
    try:
        statuses = _wrong_sign_ins(served.url, [f"198.51.100.{n}" for n in range(22)])
    finally:
        served.stop()
    assert statuses == [401] * 20 + [429] * 2


def test_hardening_forwarded_allow_ips_names_the_proxy_p1(
    tmp_path: Path, fresh_database_url: str
) -> None:
    """Behind a named proxy, the client address is the forwarded one: 20 failures from one
    client lock that client out, not another behind the same proxy."""
    served = Served(
        tmp_path, "--database", fresh_database_url, "--forwarded-allow-ips", "127.0.0.1"
    )
    try:
        statuses = _wrong_sign_ins(served.url, [PROXY_CLIENT] * 21 + ["198.51.100.9"])
    finally:
        served.stop()
    assert statuses == [401] * 20 + [429, 401]
