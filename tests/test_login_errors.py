"""`webagents login`'s refusals say what fixes them, never the command just run (issue 20):
no answer from the browser, a sign-in denied there, a device sign-in that ended or expired."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from webagents.cli import account
from webagents.portal_link.client import DeviceAnswer
from webagents.portal_link.errors import SignInError

DEVICE_PAGE = "http://127.0.0.1:8700/device"


class _Portal:
    """The device grant as a portal answers it: each poll gets the next of `answers`."""

    answers: ClassVar[list[str]] = []

    def __init__(self, base: str) -> None:
        self.base = base

    def __enter__(self) -> _Portal:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def device_code(self) -> dict[str, Any]:
        return {
            "device_code": "d",
            "user_code": "ABCD-EFGH",
            "verification_uri": DEVICE_PAGE,
            "verification_uri_complete": f"{DEVICE_PAGE}?user_code=ABCD-EFGH",
            "interval": 0,
            "expires_in": 600,
        }

    def device_token(self, device_code: str) -> DeviceAnswer:
        return DeviceAnswer(token=None, error=self.answers.pop(0))


def test_p3_login_without_an_answer_from_the_browser_names_the_other_ways_to_sign_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(account, "LOGIN_WAIT_SECONDS", 0)
    with pytest.raises(SignInError) as caught:
        account._browser_login("http://127.0.0.1:8700", open_browser=False)
    assert str(caught.value) == (
        "no answer came from the browser: open the page above and approve there; where no "
        "browser can reach this machine, sign in with webagents login --device (or --token "
        "rok_...)"
    )


def test_p3_a_device_sign_in_that_ended_says_to_approve_the_code_or_use_an_api_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(account, "PortalClient", _Portal)
    monkeypatch.setattr(account.time, "sleep", lambda _seconds: None)  # no waiting in a test
    monkeypatch.setattr(_Portal, "answers", ["authorization_pending", "expired_token"])
    with pytest.raises(SignInError) as caught:
        account._device_login("http://127.0.0.1:8700")
    assert str(caught.value) == (
        f"the device sign-in ended (expired_token): nothing was kept; approve the code on "
        f"{DEVICE_PAGE} while it is valid, or sign in with an API key (webagents login "
        "--token rok_...)"
    )
    assert "--device again" not in str(caught.value)
