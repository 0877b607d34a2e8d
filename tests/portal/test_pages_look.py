"""The owner's pages as a product's pages (P1, P8, P11; issue 25), without a browser: every
page takes its look from the portal's own static files (the vendored Pico CSS and
portal.css) and nothing inline or from elsewhere; a form's redirect says once what it did; a
chat message's Markdown is rendered and sanitized; the 404 page of a signed-in user offers
the signed-in links and no API path."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from webagents import __version__
from webagents.portal.accounts import service as accounts
from webagents.portal.chats.markdown import to_html
from webagents.portal.web import FLASH_COOKIE

from .conftest import csrf_of, make_account, sign_in

STYLESHEETS = [f"/static/pico.min.css?v={__version__}", f"/static/portal.css?v={__version__}"]


def test_p1_pages_take_their_look_from_the_portals_own_stylesheets_only(
    client: TestClient, db: Session
) -> None:
    make_account(db)
    anonymous = [client.get(path) for path in ("/signin", "/signup", "/nothing-here")]
    sign_in(client)
    signed_in = [client.get(path) for path in ("/", "/keys", "/sessions", "/password", "/chats")]
    for page in [*anonymous, *signed_in]:
        assert re.findall(r'<link rel="stylesheet" href="([^"]+)">', page.text) == STYLESHEETS
        assert re.findall(r"<style|\sstyle=|<script|https?://", page.text) == [], page.url
    for url in STYLESHEETS:
        sheet = client.get(url)
        assert (sheet.status_code, sheet.headers["content-type"]) == (
            200,
            "text/css; charset=utf-8",
        )
        assert "url(http" not in sheet.text and "@import" not in sheet.text
    script = client.get("/static/copy.js")
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    missing = [client.get(f"/static/{name}") for name in ("nope.css", "..%2Fweb.py", "")]
    assert [answer.status_code for answer in missing] == [404, 404, 404]


def test_p1_a_forms_redirect_says_once_what_it_did(client: TestClient, db: Session) -> None:
    scope = make_account(db)
    key = accounts.create_key(db, scope, "laptop").api_key
    sign_in(client)
    token = csrf_of(client.get("/keys").text)
    answer = client.post(f"/keys/{key.id}/revoke", data={"csrf_token": token})
    revoked = client.get(answer.headers["location"])
    said = re.findall(r'<p class="flash" role="status">([^<]*)</p>', revoked.text)
    assert said == ["The key is revoked: it no longer works."]
    again = client.get("/keys")
    assert re.findall(r'class="flash"', again.text) == []
    # The cookie names what was done, never words: an unknown name shows nothing.
    client.cookies.set(FLASH_COOKIE, "<b>you were hacked</b>")
    planted = client.get("/keys")
    assert (re.findall(r'class="flash"', planted.text), "hacked" in planted.text) == ([], False)


def test_p1_signing_out_says_so_on_the_sign_in_page(client: TestClient, db: Session) -> None:
    make_account(db)
    sign_in(client)
    answer = client.post("/signout", data={"csrf_token": csrf_of(client.get("/").text)})
    assert answer.headers["location"] == "/signin"
    out = client.get("/signin")
    assert re.findall(r'<p class="flash" role="status">([^<]*)</p>', out.text) == [
        "You are signed out."
    ]


def test_p1_the_404_page_of_a_signed_in_user_offers_their_links_and_no_api_path(
    client: TestClient, db: Session
) -> None:
    make_account(db)
    sign_in(client)
    page = client.get("/agents/00000000-0000-0000-0000-000000000000")
    assert page.status_code == 404
    assert re.findall(r'<li><a href="(/[^"]*)">([^<]+)</a></li>', page.text) == [
        ("/", "Agents"),
        ("/chats", "Chats"),
        ("/keys", "API keys"),
    ]
    assert re.findall(r'<p class="error" role="alert">([^<]*)</p>', page.text) == [
        "there is nothing here, or it is not yours: see your agents and chats above"
    ]
    assert ("/api/" in page.text, "Sign in" in page.text) == (False, False)


def test_p11_a_messages_markdown_is_rendered_and_sanitized() -> None:
    assert to_html("**Hi**, see `x`:\n\n```py\nprint(1)\n```\n") == (
        "<p><strong>Hi</strong>, see <code>x</code>:</p>\n"
        '<pre><code class="language-py">print(1)\n</code></pre>\n'
    )
    assert to_html('<img src=x onerror="alert(1)"><script>alert(1)</script>') == (
        '<p>&lt;img src=x onerror="alert(1)"&gt;&lt;script&gt;alert(1)&lt;/script&gt;</p>\n'
    )
    # No script link; no image loaded from elsewhere (its Markdown stays as it was written);
    # no relative link (it would pass for one of the portal's own); other sites' links kept.
    assert to_html("[a](javascript:alert(1)) ![b *c*](https://example.com/b.png)") == (
        "<p>[a](javascript:alert(1)) ![b *c*](https://example.com/b.png)</p>\n"
    )
    assert to_html("[forget](/agents/x/memory) [docs](https://example.com/d?a=1&b=2)") == (
        '<p><a rel="noopener noreferrer nofollow">forget</a> '
        '<a href="https://example.com/d?a=1&amp;b=2" rel="noopener noreferrer nofollow">'
        "docs</a></p>\n"
    )
    assert to_html("| a |\n|:-:|\n| 1 |") == (
        "<table>\n<thead>\n<tr>\n<th>a</th>\n</tr>\n</thead>\n<tbody>\n<tr>\n<td>1</td>\n"
        "</tr>\n</tbody>\n</table>\n"
    )
