"""Who a request is for: the agent it names, and its caller as that agent's verifier sees
them (A1: a credential that fails is a 401, never anonymous); shared by every API the
server speaks (Chat Completions, Responses)."""

from __future__ import annotations

from collections.abc import Awaitable

from fastapi import Request

from ..access import CHANNEL_SENDER_HEADER, Unauthorized, VerifierUnavailable
from ..caller import Caller
from .api_errors import ApiError
from .hosting import AgentHost, ServedAgent
from .relay import relayed


async def agent_named(
    host: AgentHost, request: Request, name: str, *, by_model: bool = False
) -> ServedAgent:
    """The agent named `name`; else a 404 naming only the agents this caller may call (and a
    401 first, for a credential that no agent accepts). `by_model`: the name came as `model`
    at /v1, where clients written for a provider send its model's name: the 404 says how
    to pick an agent."""
    served = host.get(name)
    if served is None and relayed(request.scope) is not None:
        raise ApiError(404, f"agent {name!r} is no longer served here", "model_not_found")
    if served is None:
        names = ", ".join(s.name for s in await listed(host, request)) or "none"
        pick = (
            " (send one's name as model, or post to /agents/<name>/chat/completions)"
            if by_model
            else ""
        )
        raise ApiError(
            404,
            f"no agent named {name!r} is served here; the agents you may call: {names}{pick}",
            "model_not_found",
        )
    return served


async def listed(host: AgentHost, request: Request) -> list[ServedAgent]:
    """The agents shown to this request's caller, as each agent's own verifier sees them."""
    shown: list[ServedAgent] = []
    refusals: list[ApiError] = []
    agents = host.all()  # one snapshot: a daemon may load or drop agents meanwhile
    for served in agents:
        try:
            caller = await verify(served, request)
        except ApiError as exc:
            refusals.append(exc)
            continue
        if host.lists_for(served, caller):
            shown.append(served)
    if refusals and len(refusals) == len(agents):  # A1: refused, never a list
        if len({r.message for r in refusals}) == 1:
            raise refusals[0]
        raise ApiError(
            401, "the credential is not valid for any agent served here", "invalid_credential"
        )
    return shown


async def verify(served: ServedAgent, request: Request) -> Caller:
    relay = relayed(request.scope)
    if relay is not None:  # from Portal Connect: the portal's assertion alone names the caller
        return await _checked(served.verifier.relayed_caller(relay.assertion))
    for header in ("authorization", "x-api-key", "api-key", CHANNEL_SENDER_HEADER):
        if len(request.headers.getlist(header)) > 1:
            # Two credentials would let whoever reads the other one disagree about the caller.
            raise ApiError(401, f"send one {header} header, not several", "invalid_credential")
    return await _checked(
        served.verifier.caller(request.headers.get("authorization"), request.headers)
    )


async def _checked(verifying: Awaitable[Caller]) -> Caller:
    try:
        return await verifying
    except Unauthorized as exc:
        raise ApiError(401, str(exc), "invalid_credential") from None
    except VerifierUnavailable as exc:
        raise ApiError(503, str(exc), "verifier_unavailable") from None
