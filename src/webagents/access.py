"""The `access:` block's verifiers: who an HTTP request's bearer credential says it is.

A request carries at most one credential: `Authorization: Bearer <token>`, or `x-api-key:
<token>` as Anthropic-style clients send it, or `api-key: <token>` as Azure OpenAI's clients
do (several at once only if they agree). No credential is an anonymous caller; a credential
that verifies is the owner, a verified caller or a channel sender; a credential that is
presented but does not verify is refused (`Unauthorized`), never treated as anonymous (A1).
Keys are kept as SHA-256 digests and compared in constant time.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx
import jwt
from jwt import PyJWK, PyJWKSet

from .agent_spec import AccessSpec, JwtIssuer
from .caller import Caller
from .errors import ConfigError, WebAgentsError

log = logging.getLogger("webagents.access")

CHANNEL_SENDER_HEADER = "x-webagents-channel-sender"
API_KEY_HEADERS = ("x-api-key", "api-key")
"""Headers that carry a key as it is, without a scheme: Anthropic-style clients send
x-api-key, Azure OpenAI's clients api-key. Each is a credential exactly like a bearer."""
PORTAL_KEY_PREFIX = "rok_"
"""A portal user's API key, which the portal exchanges for a token to call an agent."""
ANONYMOUS_TOKEN = "anonymous"
"""The bearer that says "no credential": `OpenAI(api_key="anonymous")`."""
CONNECT_TYPE = "connect"
"""The `typ` claim of a Portal Connect assertion (relayed requests only, see skills/auth.py)."""
NOT_A_BEARER = "a Portal Connect assertion is not a bearer token for this agent"
JWKS_TTL_SECONDS = 600.0
JWKS_MIN_REFRESH_SECONDS = 30.0
CLOCK_LEEWAY_SECONDS = 30
_KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
"""The JWK key type each family of (asymmetric) algorithms signs with."""


class Unauthorized(WebAgentsError):
    """A presented credential did not verify (HTTP 401)."""


class VerifierUnavailable(WebAgentsError):
    """Whoever verifies a presented credential cannot be asked now (the portal is down): the
    credential is neither taken nor called wrong (HTTP 503)."""


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


def resolve_secret(value: str, *, what: str, environ: Mapping[str, str] | None = None) -> bytes:
    """The SHA-256 digest of a secret given as `env:NAME` or `sha256:<hex>` (A5)."""
    if value.startswith("sha256:"):
        return bytes.fromhex(value.removeprefix("sha256:"))
    name = value.removeprefix("env:")
    secret = (environ if environ is not None else os.environ).get(name)
    if not secret:
        raise ConfigError(f"{what} is env:{name}, but the environment variable {name} is not set")
    if secret != secret.strip() or secret == ANONYMOUS_TOKEN:
        raise ConfigError(
            f"{what}: the key in {name} could never be presented (it has surrounding spaces, "
            f"or is {ANONYMOUS_TOKEN!r}, which means no credential)"
        )
    return _digest(secret)


def _is_loopback_http(url: str) -> bool:
    try:
        parts = urlsplit(url)
        return parts.scheme == "http" and parts.hostname in {"127.0.0.1", "localhost", "::1"}
    except ValueError:
        return False


@dataclass
class _Jwks:
    """One issuer's signing keys, fetched on first use and refreshed on an unknown key id."""

    url: str
    keys: dict[str, PyJWK] = field(default_factory=dict)
    fetched_at: float = float("-inf")
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def key(self, kid: str | None, client: httpx.AsyncClient) -> PyJWK:
        found = self._pick(kid)
        stale = time.monotonic() - self.fetched_at > JWKS_TTL_SECONDS
        if found is not None and not stale:
            return found
        async with self.lock:
            # An unknown kid refreshes at most every JWKS_MIN_REFRESH_SECONDS, so a flood of
            # made-up key ids cannot turn into a flood of requests to the issuer.
            if time.monotonic() - self.fetched_at > JWKS_MIN_REFRESH_SECONDS:
                await self._fetch(client)
        found = self._pick(kid)
        if found is None:
            raise Unauthorized("the token's signing key is not among the issuer's keys")
        return found

    def _pick(self, kid: str | None) -> PyJWK | None:
        if kid is not None:
            return self.keys.get(kid)
        return next(iter(self.keys.values())) if len(self.keys) == 1 else None

    async def _fetch(self, client: httpx.AsyncClient) -> None:
        try:
            response = await client.get(self.url, timeout=10)
            response.raise_for_status()
            keyset = PyJWKSet.from_dict(response.json())
        except (httpx.HTTPError, json.JSONDecodeError, jwt.PyJWKSetError, ValueError) as exc:
            log.warning("cannot fetch the JWKS at %s: %s", self.url, exc)
            self.fetched_at = time.monotonic()
            return
        self.keys = {key.key_id or f"#{index}": key for index, key in enumerate(keyset.keys)}
        self.fetched_at = time.monotonic()


@dataclass
class _Issuer:
    spec: JwtIssuer
    jwks: _Jwks


class PortalTokens(Protocol):
    """The `auth` skill's side: the caller a token of its portal names (None: not a token of
    that portal, left to the `access:` block); `Unauthorized` when such a token fails."""

    portal: str | None

    async def caller(self, token: str) -> Caller | None: ...

    async def aclose(self) -> None: ...


class RelayAssertions(Protocol):
    """Portal Connect's side (the `auth` skill's keys): the caller a relayed request's
    assertion names; `Unauthorized` unless it verifies."""

    portal: str | None
    agent_id: str | None

    async def relayed_caller(self, assertion: str) -> Caller: ...

    async def warm(self) -> None: ...

    async def aclose(self) -> None: ...


class AccessVerifier:
    """Turns a request's credential into a `Caller`, by the agent's `access:` block and, with
    the `auth` skill, the tokens of the portal the agent is published on."""

    relay: RelayAssertions | None = None
    """Who verifies requests relayed over Portal Connect (a published agent's portal keys)."""

    def __init__(
        self,
        spec: AccessSpec | None,
        *,
        portal: PortalTokens | None = None,
        environ: Mapping[str, str] | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        spec = spec or AccessSpec()
        self._portal = portal
        self.configured = bool(spec.owner or spec.keys or spec.jwt or spec.channels or portal)
        self._owner = (
            resolve_secret(spec.owner, what="access.owner", environ=environ) if spec.owner else None
        )
        self._keys = [
            (identity, resolve_secret(secret, what=f"access.keys[{identity!r}]", environ=environ))
            for identity, secret in spec.keys.items()
        ]
        self._channels = [
            (kind, resolve_secret(secret, what=f"access.channels[{kind!r}]", environ=environ))
            for kind, secret in spec.channels.items()
        ]
        for issuer in spec.jwt:
            if not (issuer.jwks.startswith("https://") or _is_loopback_http(issuer.jwks)):
                raise ConfigError(
                    f"access.jwt: the JWKS of {issuer.issuer} must be an https:// URL "
                    f"(got {issuer.jwks})"
                )
        self._issuers = {i.issuer: _Issuer(i, _Jwks(i.jwks)) for i in spec.jwt}
        digests = [d for d in (self._owner,) if d] + [d for _, d in self._keys + self._channels]
        if len(set(digests)) != len(digests):
            raise ConfigError(
                "access: the same key is given twice (owner, keys and channels each need their "
                "own key), so a request could not say who it is"
            )
        self._http = http

    def describe(self) -> str:
        """What this verifier accepts, for the serve banner (no secrets)."""
        parts = []
        if self._portal is not None:
            parts.append(f"tokens of the portal {self._portal.portal}")
        if self._owner is not None:
            parts.append("the owner key")
        if self._keys:
            parts.append(f"{len(self._keys)} API key{'s' if len(self._keys) != 1 else ''}")
        if self._issuers:
            parts.append("JWTs from " + ", ".join(self._issuers))
        if self._channels:
            parts.append("channel bridges (" + ", ".join(k for k, _ in self._channels) + ")")
        return ", ".join(parts) or "nothing"

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._portal is not None:
            await self._portal.aclose()
        if self.relay is not None and self.relay is not self._portal:  # type: ignore[comparison-overlap]
            await self.relay.aclose()

    async def caller(self, authorization: str | None, headers: Mapping[str, str]) -> Caller:
        """The verified caller of a request; `Unauthorized` when a credential fails.

        `headers` are the request's (lower-case names); a header given several times is
        refused before this by the server.
        """
        sender = headers.get(CHANNEL_SENDER_HEADER)
        token = _presented(authorization, headers)
        if token is None:
            if sender is not None:
                raise Unauthorized("a channel sender header needs its bridge's key")
            return Caller.anonymous()

        presented = _digest(token)
        owner = self._owner is not None and hmac.compare_digest(presented, self._owner)
        channel = _match(presented, self._channels)
        identity = _match(presented, self._keys)
        if channel is not None:
            if sender is None or not sender.strip():
                raise Unauthorized(
                    f"the {channel} bridge must name the sender in X-Webagents-Channel-Sender"
                )
            return Caller.channel(channel, sender.strip())
        if sender is not None:
            raise Unauthorized("only a channel bridge's key may name a channel sender")
        if owner:
            return Caller.owner()
        if identity is not None:
            return Caller.verified(identity)
        if self._portal is not None and (found := await self._portal.caller(token)):
            return found
        if token.count(".") == 2 and self._issuers:
            return await self._jwt_caller(token)
        if not self.configured:
            raise Unauthorized(
                "this agent verifies no one (its AGENT.md has no access: block): call it "
                'with no Authorization header, or with api_key "anonymous"'
            )
        if self._portal is not None and token.startswith(PORTAL_KEY_PREFIX):
            raise Unauthorized(
                "a portal API key is not a token for this agent: exchange it at POST "
                f'{self._portal.portal}/api/agents/token with {{"agent": "<this agent\'s '
                'name>"}, and send the access_token it answers'
            )
        raise Unauthorized("the bearer token is not valid for this agent")

    async def relayed_caller(self, assertion: object) -> Caller:
        """The caller of a request relayed over Portal Connect, from its assertion alone (the
        relayed request has no headers of its own); `Unauthorized` when it does not verify."""
        if self.relay is None:
            raise Unauthorized("this agent takes no relayed requests (it is not published)")
        if not isinstance(assertion, str) or not assertion:
            raise Unauthorized("a relayed request needs the portal's assertion")
        return await self.relay.relayed_caller(assertion)

    async def _jwt_caller(self, token: str) -> Caller:
        try:
            header = jwt.get_unverified_header(token)
            claimed = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise Unauthorized("the bearer token is not a valid JWT") from None
        if claimed.get("typ") == CONNECT_TYPE:  # whoever the issuer, it is for relays only
            raise Unauthorized(NOT_A_BEARER)
        issuer = self._issuers.get(str(claimed.get("iss")))
        if issuer is None:
            raise Unauthorized("the token's issuer is not trusted by this agent")
        algorithm = header.get("alg")
        if algorithm not in issuer.spec.algorithms:
            raise Unauthorized(f"the token's algorithm {algorithm!r} is not accepted")
        if self._http is None:
            self._http = httpx.AsyncClient()
        key = await issuer.jwks.key(header.get("kid"), self._http)
        if key.key_type != _KEY_TYPES.get(algorithm[:2]):
            raise Unauthorized("the token's algorithm does not match its signing key")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key.key,
                algorithms=[algorithm],
                audience=issuer.spec.audience,
                issuer=issuer.spec.issuer,
                leeway=CLOCK_LEEWAY_SECONDS,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("the token has expired") from None
        except jwt.InvalidAudienceError:
            raise Unauthorized("the token is not meant for this agent (audience)") from None
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthorized(f"the token lacks the {exc.claim!r} claim") from None
        except (jwt.PyJWTError, TypeError, ValueError) as exc:
            log.info("a JWT did not verify: %s", exc)
            raise Unauthorized("the token does not verify") from None
        unverified_email = False
        for claim in issuer.spec.identity:
            value = claims.get(claim)
            if not isinstance(value, str) or not value:
                continue
            # An address names someone only when its issuer says it checked it, with the JSON
            # `true`: "false", 0 or a missing claim are not a verification.
            if claim == "email" and claims.get("email_verified") is not True:
                unverified_email = True
                continue
            if issuer.spec.plain_identity:
                return Caller.verified(value)
            return Caller.verified(value, issuer=issuer.spec.issuer)
        why = "; an email counts only when the token's email_verified is true"
        why = why if unverified_email else ""
        raise Unauthorized(
            f"the token names no identity (none of the claims {', '.join(issuer.spec.identity)}"
            f"{why})"
        )


def _presented(authorization: str | None, headers: Mapping[str, str]) -> str | None:
    """The one credential a request presents, from its Authorization, x-api-key or api-key
    header.

    None: no credential. No header, an empty one, or the token `anonymous` (for clients that
    insist on sending a key, as the official one does) present none. Several of these headers
    may be sent only when they all say the same: a key that disagrees is not silently ignored.
    """
    sent: list[tuple[str, str]] = []  # (the header as named to the caller, its credential)
    keys = [(name, value) for name in API_KEY_HEADERS if (value := headers.get(name)) is not None]
    if authorization is not None:
        scheme, _, bearer = authorization.strip().partition(" ")
        bearer = bearer.strip()
        if scheme and scheme.lower() != "bearer":
            if keys:
                raise _two_credentials("Authorization", keys[0][0])
            raise Unauthorized("send the credential as Authorization: Bearer <token>")
        sent.append(("Authorization", bearer if scheme and bearer != ANONYMOUS_TOKEN else ""))
    for name, value in keys:
        key = value.strip()
        sent.append((name, "" if key == ANONYMOUS_TOKEN else key))
    for name, credential in sent[1:]:
        if not hmac.compare_digest(_digest(sent[0][1]), _digest(credential)):
            raise _two_credentials(sent[0][0], name)
    return next((credential for _, credential in sent if credential), None)


def _two_credentials(first: str, second: str) -> Unauthorized:
    return Unauthorized(
        f"the {first} and {second} headers present different credentials: send one of them"
    )


def _match(presented: bytes, candidates: list[tuple[str, bytes]]) -> str | None:
    """The name whose digest equals `presented`, comparing every candidate in constant time."""
    found = None
    for name, digest in candidates:
        if hmac.compare_digest(presented, digest) and found is None:
            found = name
    return found
