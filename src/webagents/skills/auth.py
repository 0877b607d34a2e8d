"""The `auth` skill (SPEC A): verify bearer tokens the portal signed for this agent.

`- auth` (or `- auth: {portal: URL}`) trusts the portal the agent is published on: the portal
of the folder's link (`webagents publish`), else the one `webagents login` signed in to, else
ROBUTLER_API_URL. A token the portal issued for this agent (`aud` = `agent:<agent id>`) names
its caller: the agent's owner on the portal (`tier: owner`) is the owner; any other portal
user is `caller:<username>`, while the owner allows others (the portal is asked each time:
`GET /api/agents/<id>/access`). A token from another issuer is left to the `access:` block; a
token from this portal that fails (another agent's audience, expired, an unknown key, any
algorithm but RS256) is refused, never taken for anonymous.

A served agent's verifier (access.AccessVerifier, made by server/hosting.py) asks the skill
about every presented credential that is not one of the `access:` block's keys, whichever
header carries it.

The same keys verify the assertions of Portal Connect (A4, P12): each request the portal
relays carries a JWT it signed for this agent with `typ: connect` and a unique `jti`, which
`relayed_caller` verifies (a `jti` seen before is refused while it could still verify). The two
kinds never stand in for each other: an assertion is no bearer token of HTTP, and a token is
no assertion.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any

import httpx
import jwt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..access import CONNECT_TYPE, NOT_A_BEARER, Unauthorized, VerifierUnavailable
from ..caller import Caller
from ..context import AgentInfo
from ..errors import ConfigError
from ..home import is_agent_id
from ..portal_wire.accounts import AgentAccess
from .base import Skill

log = logging.getLogger("webagents.auth")

ALGORITHM = "RS256"
UNREACHABLE = (
    "the portal that verifies this agent's callers cannot be reached just now; try again shortly"
)
JWKS_REFETCH_SECONDS = 30
NOT_ALLOWED = (
    "the owner of this agent has not allowed other users to call it: ask them to allow "
    "others on the agent's page in the portal"
)
ASSERTION_LEEWAY_SECONDS = 30
"""Clock skew allowed between the portal and this machine on an assertion's iat and exp."""


class AuthSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    portal: str | None = Field(
        default=None, description="the portal's address (default: the folder's link)"
    )


class AuthSkill(Skill[AuthSettings]):
    name = "auth"
    Settings = AuthSettings

    def __init__(
        self,
        settings: AuthSettings | None = None,
        /,
        *,
        http: httpx.AsyncClient | None = None,
        **values: Any,
    ) -> None:
        super().__init__(settings, **values)
        self._http = http
        self.portal: str | None = None
        self.agent_id: str | None = None
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at = -float("inf")
        self._fetching: asyncio.Future[None] | None = None
        self._unreachable = False
        self._seen: dict[str, float] = {}  # the jti of each assertion taken: until when
        self._next_purge = 0.0

    @classmethod
    def for_connect(cls, portal: str, agent_id: str) -> AuthSkill:
        """The verifier of relayed requests for an agent with no `auth` skill of its own,
        whose id the portal's hello named (an agent connected with WEBAGENTS_AGENT_TOKEN)."""
        skill = cls()
        skill.portal, skill.agent_id = portal.rstrip("/"), agent_id
        return skill

    def bind(self, agent: AgentInfo) -> None:
        link = _link(agent)
        self.agent_id = link.get("agentId") if link else None
        if self.agent_id is not None and not is_agent_id(self.agent_id):
            raise ConfigError(
                f"{agent.directory}/.webagents/config.json: link.agentId {self.agent_id!r} is "
                "not an agent id (a UUID): run webagents publish again, or fix the link"
            )
        if not self.agent_id:
            raise ConfigError(
                f"the auth skill verifies the portal's tokens for agent {agent.name!r}, which "
                "is not published: run webagents publish in its folder first"
            )
        portal = self.settings.portal or (link or {}).get("portal") or _login_portal(agent)
        portal = portal or os.environ.get("ROBUTLER_API_URL")
        if not portal:
            raise ConfigError(
                "the auth skill does not know the portal: set auth: {portal: URL}, or run "
                "webagents login and webagents publish"
            )
        self.portal = str(portal).rstrip("/")

    @property
    def audience(self) -> str:
        return f"agent:{self.agent_id}"

    async def caller(self, token: str) -> Caller | None:
        """The caller a portal token names; None when the token is not this portal's."""
        if token.count(".") != 2:
            return None
        try:
            header = jwt.get_unverified_header(token)
            claimed = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            return None
        if claimed.get("iss") != self.portal:
            return None
        if claimed.get("typ") == CONNECT_TYPE:
            # The portal hands assertions to the agent only, over Connect: one presented over
            # HTTP was taken from a relay, and is refused before its signature is looked at.
            raise Unauthorized(NOT_A_BEARER)
        claims = await self._claims(token, header, "the portal token", leeway=0)
        if claims.get("tier") == "owner":
            return Caller.owner()
        username = claims.get("username")
        if not isinstance(username, str) or not username:
            raise Unauthorized("the portal token names no user")
        if not await self._allows_others():
            raise Unauthorized(NOT_ALLOWED)
        return Caller.verified(username)

    async def relayed_caller(self, assertion: str) -> Caller:
        """The caller a Portal Connect assertion names (`Unauthorized` unless it verifies:
        this portal's key, this agent's audience, `typ: connect`, unexpired, a new `jti`)."""
        what = "the relay assertion"
        try:
            header = jwt.get_unverified_header(assertion)
            claimed = jwt.decode(assertion, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise Unauthorized(f"{what} is not a JWT") from None
        if claimed.get("iss") != self.portal:
            raise Unauthorized(f"{what} is not from this agent's portal {self.portal}")
        if claimed.get("typ") != CONNECT_TYPE:
            raise Unauthorized(f"{what} is not one (its typ is not {CONNECT_TYPE!r})")
        claims = await self._claims(
            assertion, header, what, leeway=ASSERTION_LEEWAY_SECONDS, require=("jti",)
        )
        jti = claims["jti"]
        if not isinstance(jti, str) or not jti:
            raise Unauthorized(f"{what} has no jti")
        now = time.time()
        self._forget_expired(now)
        if jti in self._seen:
            raise Unauthorized(f"{what} was used before (replayed jti)")
        # Kept for as long as the assertion could still verify; then its exp refuses it.
        self._seen[jti] = float(claims["exp"]) + ASSERTION_LEEWAY_SECONDS
        if claims.get("tier") == "owner":
            return Caller.owner()
        username = claims.get("username")
        if not isinstance(username, str) or not username:
            raise Unauthorized(f"{what} names no user")
        # `channel` (the portal's web chat box: "web") says where the user is, not who: the
        # same portal user is the same caller, with the same notes, wherever they write from.
        return Caller.verified(username)

    async def _allows_others(self) -> bool:
        """The owner's choice as the portal holds it now, asked for each user's token: a
        token names its tier when it was minted, and the owner may have turned others off
        since (a relayed request needs no asking: the portal decided it for that request)."""
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=10)
        url = f"{self.portal}/api/agents/{self.agent_id}/access"
        try:
            answer = await self._http.get(url)
            if answer.status_code == 404:
                return False  # the portal no longer knows the agent: nobody else is allowed
            answer.raise_for_status()
            allowed = AgentAccess.model_validate_json(answer.content, strict=True).allowOthers
        except (httpx.HTTPError, ValidationError) as exc:
            log.warning("auth: the owner's choice could not be read from %s (%s)", url, exc)
            raise VerifierUnavailable(UNREACHABLE) from None
        return allowed

    async def warm(self) -> None:
        """Fetch the portal's keys now if none are known (Portal Connect, once connected), so
        that the first relayed request waits on no round trip to the portal. A failure is
        logged and left for that request to try again."""
        if self._keys:
            return
        try:
            await self._fetch()
        except VerifierUnavailable:
            self._fetched_at = -float("inf")  # not counted against the next request's fetch

    def _forget_expired(self, now: float) -> None:
        if now < self._next_purge:
            return
        self._seen = {jti: until for jti, until in self._seen.items() if until > now}
        self._next_purge = now + 10

    async def _claims(
        self,
        token: str,
        header: dict[str, Any],
        what: str,
        *,
        leeway: int,
        require: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """The claims of a token of this portal for this agent, once its signature verifies."""
        if header.get("alg") != ALGORITHM:
            raise Unauthorized(f"the portal's tokens are {ALGORITHM}, not {header.get('alg')!r}")
        key = await self._key(header.get("kid"))
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                audience=self.audience,
                issuer=self.portal,
                leeway=leeway,
                options={"require": ["exp", "iat", "iss", "aud", "sub", *require]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized(f"{what} has expired: get a new one") from None
        except jwt.InvalidAudienceError:
            raise Unauthorized(f"{what} is for another agent (audience)") from None
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"{what} does not verify ({exc})") from None
        return claims

    async def _key(self, kid: object) -> jwt.PyJWK:
        if isinstance(kid, str) and kid in self._keys:
            return self._keys[kid]
        # An unknown kid may be a key the portal has just rotated in: fetch the JWKS again,
        # but not more often than every JWKS_REFETCH_SECONDS, whatever callers send.
        if self._fetching is not None and not self._fetching.done():
            await asyncio.shield(self._fetching)  # the fetch under way may bring it
        elif time.monotonic() - self._fetched_at >= JWKS_REFETCH_SECONDS:
            await self._fetch()
        if isinstance(kid, str) and kid in self._keys:
            return self._keys[kid]
        if self._unreachable:
            raise VerifierUnavailable(UNREACHABLE)  # its keys are unknown, not the token wrong
        raise Unauthorized("the portal token is signed by a key the portal does not publish")

    async def _fetch(self) -> None:
        """One fetch at a time: whoever needs the keys meanwhile waits for the one under way
        (so that requests arriving together, or the first one beside `warm`, are not refused
        for keys that are on their way)."""
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.ensure_future(self._fetch_now())
        await asyncio.shield(self._fetching)

    async def _fetch_now(self) -> None:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=10)
        url = f"{self.portal}/.well-known/jwks.json"
        self._fetched_at = time.monotonic()
        try:
            answer = await self._http.get(url)
            answer.raise_for_status()
            keys = answer.json()["keys"]
            self._keys = {str(k["kid"]): jwt.PyJWK(k) for k in keys if k.get("alg") == ALGORITHM}
        except (httpx.HTTPError, ValueError, KeyError, TypeError, jwt.PyJWTError) as exc:
            # The details are the owner's (the log), not the caller's; the caller's token is
            # not wrong for it, so this is no 401.
            log.warning("auth: the portal's keys could not be read from %s (%s)", url, exc)
            self._unreachable = True
            raise VerifierUnavailable(UNREACHABLE) from None
        self._unreachable = False

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def has_link(agent: AgentInfo) -> bool:
    """Whether the agent's folder is published (`webagents publish` wrote its link)."""
    return _link(agent) is not None


def _link(agent: AgentInfo) -> dict[str, Any] | None:
    if agent.directory is None:
        return None
    path = agent.directory / ".webagents" / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc}): fix or remove it") from None
    link = config.get("link") if isinstance(config, dict) else None
    return link if isinstance(link, dict) else None


def _login_portal(agent: AgentInfo) -> str | None:
    from ..portal_link.login import load_login

    kept = load_login(agent.profile)
    return kept.portal if kept else None
