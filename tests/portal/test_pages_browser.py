"""Every page of the portal in Chromium (issue 25), against a real `webagents portal serve`
on PostgreSQL (SQLite with --db sqlite): at 375 px and 1280 px, light and dark, each page
shows its heading, fits a phone's width, passes axe-core with no serious or critical
violation (at the phone's width, where its contrast rule is strictest), asks nothing of
another origin, and breaks no rule of its content security policy. A screenshot of each is
kept under test-artifacts/screenshots/ (named page-width-scheme.png) for a person to look
at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from .account_helpers import new_user_key
from .chats_browser_helpers import _sign_in
from .conftest import PASSWORD
from .page_checks import (
    COLOUR_RULES,
    SCHEMES,
    SCREENSHOTS,
    WIDTHS,
    Watch,
    overflows,
    screenshot,
)
from .page_checks import serious_violations as axe
from .processes import Served, portal

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): what these tests prove, the
# pages in Chromium against a served portal, does not depend on the database beyond what the
# repository and app tests prove on both; test_accounts_browser keeps this seam's run on SQLite.
pytestmark = pytest.mark.whole_system

MEMORY = "/api/storage/memory-scoped"
REPLY = """Here is the plan, **in short**:

1. Launch in *March*.
2. Tell `bob`.

```python
print("launch")
```

| step | when |
|------|------|
| beta | May  |
"""


def _world(tmp_path: Path, url: str, database: str) -> dict[str, str]:
    """alice, her agent with a chat (Markdown, a tool call) and notes in three namespaces,
    one of them forgotten."""
    user = {"Authorization": f"Bearer {new_user_key(database, 'alice')}"}
    with httpx.Client(base_url=url, headers=user) as api:
        created = api.post("/api/agents", json={"name": "helper", "description": "Plans things"})
        assert created.status_code == 201, created.text
        agent_id = created.json()["agent"]["id"]
        agent = {"Authorization": f"Bearer {created.json()['rawApiKey']}"}
        call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        turns = [
            {"role": "user", "content": "What is the plan?", "id": "m1"},
            {"role": "assistant", "content": None, "tool_calls": [call], "id": "m2"},
            {"role": "tool", "content": "launch: March", "tool_call_id": "c1", "id": "m3"},
            {"role": "assistant", "content": REPLY, "id": "m4"},
        ]
        recorded = api.post(
            f"/api/agents/{agent_id}/conversations", json={"sessionId": "s1", "messages": turns}
        )
        assert recorded.status_code == 200, recorded.text
    notes = [
        ("owner", "plan", "launch in March", "the plan"),
        ("shared", "faq", "opening hours 9-5", "hours"),
        ("caller:bob", "prefs", "tea, no sugar", "what bob likes"),
        ("owner", "old", "a note to forget", ""),
    ]
    for namespace, key, content, description in notes:
        entry = {"namespace": namespace, "key": key, "content": content}
        entry |= {"description": description, "source": "agent", "at": None}
        assert httpx.put(f"{url}{MEMORY}", headers=agent, json=entry).status_code == 200
    forgot = httpx.delete(
        f"{url}{MEMORY}", headers=agent, params={"namespace": "owner", "key": "old"}
    )
    assert forgot.status_code == 200, forgot.text
    return {"agent": agent_id, "chat": recorded.json()["chatId"]}


def _pages(world: dict[str, str]) -> dict[str, tuple[str, int]]:
    """Every page a signed-in owner sees: its name (for the screenshot), path, status."""
    agent = f"/agents/{world['agent']}"
    memory = f"{agent}/memory"
    return {
        "home": ("/", 200),
        "keys": ("/keys", 200),
        "sessions": ("/sessions", 200),
        "password": ("/password", 200),
        "chats": ("/chats", 200),
        "agent": (agent, 200),
        "agent-chats": (f"{agent}/chats", 200),
        "chat": (f"{agent}/chats/{world['chat']}", 200),
        "memory": (memory, 200),
        "namespace": (f"{memory}/namespace?namespace=owner", 200),
        "entry": (f"{memory}/entry?namespace=owner&key=plan", 200),
        "search": (f"{memory}/search?q=plan", 200),
        "forget": (f"{memory}/forget?namespace=owner&key=plan", 200),
        "forgotten": (f"{memory}/forgotten?namespace=owner", 200),
        "device": ("/device", 200),
        "cli-auth": ("/cli/auth?port=8123&state=" + "s" * 32, 200),
        "not-found": (f"{agent}/chats/00000000-0000-0000-0000-000000000000", 404),
    }


ANONYMOUS = {"signin": ("/signin", 200), "signup": ("/signup", 200), "nowhere": ("/x", 404)}


def _check(page: Any, url: str, pages: dict[str, tuple[str, int]], scheme: str) -> list[str]:
    """Each page loaded once in this colour scheme, then looked at in every width: resizing
    the window changes only the type's size and the columns (the stylesheets hide nothing by
    width), so a load for each width would only repeat the first. axe runs at the phone's
    width, where the type is smallest and its contrast rule strictest (text at larger sizes
    needs less contrast): every rule in the first scheme, the rules of colours in the others
    (a scheme changes colours only). The scheme is the context's (set before the load):
    switching it on a loaded page would check colours in the middle of their transitions."""
    problems: list[str] = []
    watch = Watch(page, url)
    for name, (path, status) in pages.items():
        page.set_viewport_size({"width": min(WIDTHS), "height": 800})
        answer = page.goto(url + path)
        if answer is None or answer.status != status:
            where = f"{name}, {scheme}"
            problems.append(f"{where}: answered {answer and answer.status}, not {status}")
            continue
        for width in sorted(WIDTHS):
            where = f"{name} at {width} px, {scheme}"
            page.set_viewport_size({"width": width, "height": 800})
            if not page.locator("h1").first.is_visible():
                problems.append(f"{where}: no heading shown")
            if width == min(WIDTHS):
                if overflows(page):
                    problems.append(f"{where}: wider than the window")
                rules = None if scheme == SCHEMES[0] else COLOUR_RULES
                problems.extend(f"{where}: {violation}" for violation in axe(page, rules))
            screenshot(page, name, width, scheme)
    problems.extend(f"asked another origin: {found}" for found in watch.elsewhere)
    problems.extend(f"refused by the policy: {found}" for found in watch.refused)
    return problems


def test_p8_every_page_is_accessible_fits_a_phone_and_stays_on_the_portal_in_chromium(
    tmp_path: Path,
    fresh_database_url: str,
    served: Served,
    chromium: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    world = _world(tmp_path, served.url, fresh_database_url)
    signing_in = chromium.new_context()
    _sign_in(signing_in.new_page(), served.url, "alice")
    signed_in = signing_in.storage_state()
    signing_in.close()

    problems: list[str] = []
    for scheme in SCHEMES:
        for state, pages in ((signed_in, _pages(world)), (None, ANONYMOUS)):
            context = chromium.new_context(storage_state=state, color_scheme=scheme)
            try:
                problems += _check(context.new_page(), served.url, pages, scheme)
            finally:
                context.close()
    with capsys.disabled():
        print(f"\nscreenshots of the portal's pages: {SCREENSHOTS}")
    assert problems == []


def test_p1_the_keyboard_alone_signs_in_and_shows_where_it_is_in_chromium(
    tmp_path: Path, fresh_database_url: str, served: Served, page: Any
) -> None:
    assert portal(tmp_path, "adduser", "alice", "--database", fresh_database_url, stdin=PASSWORD)
    page.goto(f"{served.url}/signin")
    focused = "() => [document.activeElement.id || document.activeElement.textContent, "
    focused += "getComputedStyle(document.activeElement).outlineStyle]"
    assert page.evaluate(focused) == ["username", "solid"]  # the form is ready to type in
    page.keyboard.type("alice")
    page.keyboard.press("Tab")
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Enter")
    page.wait_for_url(f"{served.url}/")
    assert page.inner_text("h1") == "Signed in as alice"
    page.keyboard.press("Tab")  # the first stop of a page skips the portal's links
    assert page.evaluate(focused) == ["Skip to the page", "solid"]
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    assert page.evaluate(focused) == ["API keys", "solid"]  # the page's first link...
    assert page.evaluate("() => document.activeElement.closest('main').id") == "main"  # not nav's
