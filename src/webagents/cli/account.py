"""`webagents login`, `whoami`, `logout`: this profile's sign-in on a portal (SPEC P3).

login: by the browser (a one-request server on 127.0.0.1 receives the token, checking the
`state` it sent), by an API key (`--token rok_...`), or by the device grant (`--device`).
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import secrets
import threading
import time
import webbrowser
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import click

from ..errors import ConfigError, WebAgentsError
from ..portal_link.client import PortalClient
from ..portal_link.errors import SignInError
from ..portal_link.login import Login, forget_login, load_login, portal_url, save_login
from .exit_codes import run_or_exit
from .profile_option import current_profile, profile_option

LOGIN_WAIT_SECONDS = 600


def run_login(
    profile: str | None,
    portal: str | None,
    token: str | None,
    device: bool,
    open_browser: bool,
) -> None:
    remembered = load_login(profile)
    base = portal_url(portal, remembered.portal if remembered else None)
    if token is not None:
        if not token.startswith("rok_"):
            raise ConfigError("--token takes an API key (rok_...) from the portal's API keys page")
        access = _exchange_key(
            base,
            token,
            again="webagents login" + (f" --portal {base}" if portal is not None else ""),
        )
    elif device:
        access = _device_login(base)
    else:
        access = _browser_login(base, open_browser)
    with PortalClient(base, access) as client:
        user = client.me()
    save_login(profile, Login(base, user.username, str(user.id), access))
    click.echo(f"webagents: signed in to {base} as {user.username}")


def _exchange_key(base: str, key: str, again: str) -> str:
    """An access token for an API key; a refused key says how to sign in instead (not the
    command just run: the same key would be refused again)."""
    with PortalClient(base, key) as client:
        try:
            return client.exchange_key().access_token
        except SignInError:
            raise SignInError(
                f"the portal at {base} refused this API key (it is unknown there, or was "
                f"revoked): make a new one on the portal's API keys page, {base}/keys, and "
                f"sign in with it ({again} --token rok_...), or sign in in the browser: "
                f"{again}"
            ) from None


def run_whoami(profile: str | None) -> None:
    kept = _kept(profile)
    with PortalClient(kept.portal, kept.access_token) as client:
        user = client.me()
    click.echo(f"{user.username} ({user.id}) at {kept.portal}")


def run_logout(profile: str | None) -> None:
    kept = load_login(profile)
    if kept is None:
        click.echo("webagents: not signed in; nothing to do")
        return
    try:
        with PortalClient(kept.portal, kept.access_token) as client:
            client.logout()
        revoked = "revoked on the portal"
    except SignInError:
        revoked = "it had already expired or been revoked"
    except WebAgentsError as exc:
        revoked = f"NOT revoked on the portal ({exc})"
    forget_login(profile)
    click.echo(f"webagents: signed out of {kept.portal} ({revoked})")


def _kept(profile: str | None) -> Login:
    kept = load_login(profile)
    if kept is None:
        raise SignInError("not signed in to a portal: run webagents login")
    return kept


# The portal sends the token here in the URL's query (SPEC P3 pins the callback's URL), so the
# page replaces its URL by the bare path as it opens: the token is left in neither the
# address bar nor the tab's history. The script is inline, allowed by its hash alone: this
# server answers one request and closes, so a script file of its own would not be served.
_REPLACE_URL_SCRIPT = 'history.replaceState(null, "", location.pathname);'
_REPLACE_URL = f"<script>{_REPLACE_URL_SCRIPT}</script>"
_CALLBACK_CSP = (
    "default-src 'none'; script-src "
    f"'sha256-{base64.b64encode(hashlib.sha256(_REPLACE_URL_SCRIPT.encode()).digest()).decode()}'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class _Callback(http.server.BaseHTTPRequestHandler):
    """The one request the browser brings back from /cli/auth."""

    server: _CallbackServer

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = {key: values[0] for key, values in parse_qs(parts.query).items()}
        if parts.path != "/callback":
            self._answer(404, "Not the sign-in callback.")
            return
        if not secrets.compare_digest(query.get("state", ""), self.server.state):
            # Not the answer to this login (another page, or someone else's link): refused,
            # and the login keeps waiting for its own.
            self._answer(400, "This answer is not for the sign-in in progress; it was ignored.")
            self.server.refused += 1
            return
        if query.get("error"):
            self.server.result = {"error": query["error"]}
            self._answer(200, "Sign-in denied. You can close this tab.")
            return
        if not query.get("token"):
            self._answer(400, "The answer carries no token.")
            return
        self.server.result = query
        self._answer(200, "Signed in: you can close this tab and return to the terminal.")

    def _answer(self, status: int, text: str) -> None:
        body = f"<!doctype html><title>webagents login</title>{_REPLACE_URL}<p>{text}</p>".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Security-Policy", _CALLBACK_CSP)
        self.send_header("Cache-Control", "no-store")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the terminal shows the login's own lines only


class _CallbackServer(http.server.HTTPServer):
    def __init__(self, state: str) -> None:
        super().__init__(("127.0.0.1", 0), _Callback)
        self.state = state
        self.result: dict[str, str] | None = None
        self.refused = 0


def _browser_login(base: str, open_browser: bool) -> str:
    state = secrets.token_urlsafe(24)
    server = _CallbackServer(state)
    port = server.server_address[1]
    url = f"{base}/cli/auth?{urlencode({'port': port, 'state': state})}"
    click.echo(f"Open this page to sign in (waiting for the browser):\n  {url}")
    if open_browser:
        threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
    server.timeout = 1
    deadline = time.monotonic() + LOGIN_WAIT_SECONDS
    try:
        while server.result is None and time.monotonic() < deadline:
            server.handle_request()
    finally:
        server.server_close()
    if server.result is None:
        raise SignInError(
            "no answer came from the browser: open the page above and approve there; where "
            "no browser can reach this machine, sign in with webagents login --device (or "
            "--token rok_...)"
        )
    if "error" in server.result:
        raise SignInError(
            f"the sign-in was refused in the browser ({server.result['error']}): nothing was "
            "kept; to sign in, choose Approve on the portal's sign-in page"
        )
    return server.result["token"]


def _device_login(base: str) -> str:
    with PortalClient(base) as client:
        grant = client.device_code()
        click.echo(
            f"On any device, open {grant['verification_uri']} and enter the code "
            f"{grant['user_code']}\n  (or open {grant['verification_uri_complete']})"
        )
        interval = float(grant.get("interval", 5))
        deadline = time.monotonic() + float(grant.get("expires_in", 600))
        while time.monotonic() < deadline:
            time.sleep(interval)
            answer = client.device_token(str(grant["device_code"]))
            if answer.token is not None:
                return str(answer.token["access_token"])
            if answer.error == "slow_down":
                interval += 5
            elif answer.error != "authorization_pending":
                raise SignInError(
                    f"the device sign-in ended ({answer.error}): nothing was kept; approve the "
                    f"code on {grant['verification_uri']} while it is valid, or sign in with "
                    "an API key (webagents login --token rok_...)"
                )
    raise SignInError(
        f"the device code expired unanswered: approve the code on {grant['verification_uri']} "
        "while it is valid, or sign in with an API key (webagents login --token rok_...)"
    )


@click.command()
@click.option(
    "--portal",
    "portal_url",
    metavar="URL",
    help="The portal (default: ROBUTLER_API_URL, else the last one signed in to, else "
    "http://127.0.0.1:8700).",
)
@click.option("--token", metavar="rok_...", help="Sign in with an API key instead of the browser.")
@click.option("--device", is_flag=True, help="Sign in from another device (no browser here).")
@click.option("--no-browser", is_flag=True, help="Print the sign-in page's address only.")
@profile_option
@click.pass_context
def login(
    ctx: click.Context,
    portal_url: str | None,
    token: str | None,
    device: bool,
    no_browser: bool,
    profile: str | None,
) -> None:
    """Sign in to a portal; the sign-in is kept 0600 for this profile."""
    if token is not None and device:
        raise click.UsageError("give --token or --device, not both")
    run_or_exit(run_login, current_profile(ctx, profile), portal_url, token, device, not no_browser)


@click.command()
@profile_option
@click.pass_context
def whoami(ctx: click.Context, profile: str | None) -> None:
    """Who this profile is signed in as, asked of the portal."""
    run_or_exit(run_whoami, current_profile(ctx, profile))


@click.command()
@profile_option
@click.pass_context
def logout(ctx: click.Context, profile: str | None) -> None:
    """Revoke this profile's sign-in on the portal, then forget it."""
    run_or_exit(run_logout, current_profile(ctx, profile))
