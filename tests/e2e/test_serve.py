"""`webagents serve` as a process, called with the official openai client and raw HTTP.

SPEC section 2 (A1-A6) and section 6: every request carries exactly one verified caller;
a credential that fails is a 401, never anonymous; errors are OpenAI-shaped.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import openai
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.openai_callers import caller
from webagents.model import ModelRequest
from webagents.testing import AppServer, FunctionModel, Reply, ScriptedServer, call

from .conftest import child_env
from .serving import Process, running, write

pytestmark = pytest.mark.e2e

ISSUER = "https://id.example.test"
KEYS = {
    "HELPER_OWNER_KEY": "owner-secret-1",
    "ALICE_KEY": "alice-secret-1",
    "CAROL_KEY": "carol-secret-1",
    "TELEGRAM_BRIDGE_KEY": "bridge-secret-1",
}
BOB_KEY = "bob-secret-1"


def _probe(request: ModelRequest) -> Any:
    """Asks the probe who is calling and answers with what it said."""
    last = request.messages[-1]
    if last["role"] == "tool":
        return Reply("caller: " + last["content"])
    if last["content"] == "explode":
        raise RuntimeError("the model broke")
    if last["content"].startswith("wait"):
        return call("wait", seconds=120)
    return call("whoami")


class Identity:
    """A JWT issuer: its RSA key, published at a real local JWKS endpoint."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        jwk.update(kid="k1", use="sig", alg="RS256")
        self.jwks = {"keys": [jwk]}

    def token(self, *, key: Any = None, alg: str = "RS256", **overrides: Any) -> str:
        claims = {
            "iss": ISSUER,
            "aud": "helper",
            "exp": int(time.time()) + 300,
            "sub": "user-7",
            "email": "dana@example.com",
            "email_verified": True,
            **overrides,
        }
        claims = {k: v for k, v in claims.items() if v is not None}
        return jwt.encode(claims, key or self.key, algorithm=alg, headers={"kid": "k1"})

    def unsigned(self) -> str:
        def part(value: dict[str, Any]) -> str:
            return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

        claims = {
            "iss": ISSUER,
            "aud": "helper",
            "exp": int(time.time()) + 300,
            "email": "mallory@example.com",
        }
        return f"{part({'alg': 'none', 'typ': 'JWT', 'kid': 'k1'})}.{part(claims)}."


@pytest.fixture(scope="module")
def identity() -> Iterator[tuple[Identity, AppServer]]:
    issuer = Identity()

    async def jwks(request: Any) -> JSONResponse:
        return JSONResponse(issuer.jwks)

    with AppServer(Starlette(routes=[Route("/jwks.json", jwks)])) as server:
        yield issuer, server


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedServer]:
    with ScriptedServer(FunctionModel(_probe)) as server:
        yield server


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
    identity: tuple[Identity, AppServer],
    model_server: ScriptedServer,
) -> Iterator[tuple[Process, Path]]:
    root = tmp_path_factory.mktemp("serve")
    record = root / "probe-events.log"
    bob_digest = hashlib.sha256(BOB_KEY.encode()).hexdigest()
    write(
        root / "helper" / "AGENT.md",
        f"""---
name: helper
description: Reports who calls.
model: openai/test-model
skills:
  - webagents.testing:ProbeSkill: {{record: {record}}}
access:
  owner: env:HELPER_OWNER_KEY
  keys:
    alice@example.com: env:ALICE_KEY
    bob@example.com: sha256:{bob_digest}
    "carol,evil@example.com": env:CAROL_KEY
  jwt:
    - issuer: {ISSUER}
      jwks: {identity[1].url}/jwks.json
      audience: helper
      identity: [email, sub]
  channels:
    telegram: env:TELEGRAM_BRIDGE_KEY
---
Report the caller.
""",
    )
    env = child_env(root, OPENAI_BASE_URL=model_server.base_url, **KEYS)
    with running(["serve", str(root / "helper"), "--max-body-mb", "1"], env) as process:
        yield process, record


def client(process: Process, key: str, **headers: str) -> openai.OpenAI:
    return caller(f"{process.url}/v1", key, default_headers=headers, max_retries=0)


def caller_seen(
    process: Process, key: str, agent: str = "helper", **headers: str
) -> dict[str, Any]:
    reply = client(process, key, **headers).chat.completions.create(
        model=agent, messages=[{"role": "user", "content": "who am I?"}]
    )
    content = reply.choices[0].message.content or ""
    assert content.startswith("caller: "), content
    seen: dict[str, Any] = json.loads(content.removeprefix("caller: "))
    return seen


def test_a6_each_credential_resolves_to_its_caller(
    served: tuple[Process, Path], identity: tuple[Identity, AppServer]
) -> None:
    process, _ = served
    issuer = identity[0]
    seen = {
        "owner": caller_seen(process, KEYS["HELPER_OWNER_KEY"]),
        "alice (env key)": caller_seen(process, KEYS["ALICE_KEY"]),
        "bob (sha256 key)": caller_seen(process, BOB_KEY),
        "jwt email": caller_seen(process, issuer.token()),
        "jwt sub only": caller_seen(process, issuer.token(email=None)),
        "jwt unverified email": caller_seen(process, issuer.token(email_verified=None)),
        "jwt sub of an API key": caller_seen(
            process, issuer.token(email=None, sub="alice@example.com")
        ),
        "channel": caller_seen(
            process, KEYS["TELEGRAM_BRIDGE_KEY"], **{"X-Webagents-Channel-Sender": "4242"}
        ),
        "nobody": caller_seen(process, "anonymous"),
    }
    summary = {name: (s["kind"], s["identity"], s["namespace"]) for name, s in seen.items()}
    assert summary == {
        "owner": ("owner", None, "owner"),
        "alice (env key)": ("verified", "alice@example.com", "caller:alice@example.com"),
        "bob (sha256 key)": ("verified", "bob@example.com", "caller:bob@example.com"),
        "jwt email": ("verified", "dana@example.com", f"caller:jwt:{ISSUER}#dana@example.com"),
        "jwt sub only": ("verified", "user-7", f"caller:jwt:{ISSUER}#user-7"),
        "jwt unverified email": ("verified", "user-7", f"caller:jwt:{ISSUER}#user-7"),
        "jwt sub of an API key": (
            "verified",
            "alice@example.com",
            f"caller:jwt:{ISSUER}#alice@example.com",
        ),
        "channel": ("channel", "telegram:4242", "caller:channel:telegram:4242"),
        "nobody": ("anonymous", None, None),
    }


def test_a2_an_identity_with_a_comma_names_no_namespace(
    served: tuple[Process, Path], identity: tuple[Identity, AppServer]
) -> None:
    process, _ = served
    by_key = caller_seen(process, KEYS["CAROL_KEY"])
    by_jwt = caller_seen(process, identity[0].token(email="eve,owner@example.com"))
    assert (by_key["kind"], by_key["identity"], by_key["namespace"]) == (
        "verified",
        "carol,evil@example.com",
        None,
    )
    assert (by_jwt["kind"], by_jwt["identity"], by_jwt["namespace"]) == (
        "verified",
        "eve,owner@example.com",
        None,
    )


def _post(
    process: Process,
    body: Any,
    headers: dict[str, str] | None = None,
    path: str = "/v1/chat/completions",
) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        f"{process.url}{path}",
        content=content,
        timeout=30,
        headers={"content-type": "application/json", **(headers or {})},
    )


HELLO = {"model": "helper", "messages": [{"role": "user", "content": "who am I?"}]}


@pytest.mark.parametrize(
    ("credential", "headers", "message"),
    [
        ("Bearer not-a-key", {}, "the bearer token is not valid for this agent"),
        ("Basic YWxpY2U6cHc=", {}, "send the credential as Authorization: Bearer <token>"),
        ("bad signature", {}, "the token does not verify"),
        ("wrong audience", {}, "the token is not meant for this agent (audience)"),
        ("expired", {}, "the token has expired"),
        ("alg none", {}, "the token's algorithm 'none' is not accepted"),
        ("HS256 with the public key", {}, "the token's algorithm 'HS256' is not accepted"),
        ("untrusted issuer", {}, "the token's issuer is not trusted by this agent"),
        ("no expiry", {}, "the token lacks the 'exp' claim"),
        (
            "Bearer bridge-secret-1",
            {},
            "the telegram bridge must name the sender in X-Webagents-Channel-Sender",
        ),
        (
            "Bearer alice-secret-1",
            {"X-Webagents-Channel-Sender": "4242"},
            "only a channel bridge's key may name a channel sender",
        ),
        (
            None,
            {"X-Webagents-Channel-Sender": "4242"},
            "a channel sender header needs its bridge's key",
        ),
    ],
)
def test_a1_a_credential_that_fails_is_401_never_anonymous(
    served: tuple[Process, Path],
    identity: tuple[Identity, AppServer],
    credential: str | None,
    headers: dict[str, str],
    message: str,
) -> None:
    process, _ = served
    issuer = identity[0]
    tokens = {
        "bad signature": issuer.token(key=issuer.other),
        "wrong audience": issuer.token(aud="someone-else"),
        "expired": issuer.token(exp=int(time.time()) - 3600),
        "alg none": issuer.unsigned(),
        "HS256 with the public key": jwt.encode(
            {"iss": ISSUER, "aud": "helper", "exp": int(time.time()) + 60, "email": "m@x.org"},
            "a-shared-secret-that-is-long-enough-for-hs256",
            algorithm="HS256",
        ),
        "untrusted issuer": issuer.token(iss="https://evil.example.test"),
        "no expiry": issuer.token(exp=None),
    }
    sent = dict(headers)
    if credential is not None:
        sent["Authorization"] = (
            f"Bearer {tokens[credential]}" if credential in tokens else credential
        )
    for path, body in (("/v1/chat/completions", HELLO), ("/agents/helper/chat/completions", HELLO)):
        answer = _post(process, body, sent, path)
        assert (answer.status_code, answer.json()) == (
            401,
            {
                "error": {
                    "message": message,
                    "type": "authentication_error",
                    "param": None,
                    "code": "invalid_credential",
                }
            },
        )


def test_the_official_client_sees_401_as_an_authentication_error(
    served: tuple[Process, Path],
) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        client(served[0], "wrong").chat.completions.create(
            model="helper", messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.status_code == 401


def test_streaming_with_a_session_id_reaches_the_skills(served: tuple[Process, Path]) -> None:
    process, _ = served
    stream = client(process, KEYS["ALICE_KEY"]).chat.completions.create(
        model="helper",
        messages=[{"role": "user", "content": "who am I?"}],
        stream=True,
        stream_options={"include_usage": True},
        metadata={"session_id": "launch-plan", "source": "test"},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    seen = json.loads(text.removeprefix("caller: "))
    assert (seen["identity"], seen["conversation_id"], seen["metadata"]) == (
        "alice@example.com",
        "launch-plan",
        {"session_id": "launch-plan", "source": "test"},
    )
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage = chunks[-1].usage
    assert (
        usage is not None
        and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens > 0
    )
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) >= 2


def test_the_agent_route_serves_the_same_agent(served: tuple[Process, Path]) -> None:
    process, _ = served
    answer = caller(
        f"{process.url}/agents/helper", KEYS["ALICE_KEY"], max_retries=0
    ).chat.completions.create(model="anything", messages=[{"role": "user", "content": "who?"}])
    assert (
        json.loads((answer.choices[0].message.content or "").removeprefix("caller: "))["identity"]
        == "alice@example.com"
    )


def _error(answer: httpx.Response) -> tuple[int, str, str, str | None]:
    error = answer.json()["error"]
    return answer.status_code, error["type"], error["message"], error["code"]


def test_bad_requests_get_openai_shaped_errors(served: tuple[Process, Path]) -> None:
    process, _ = served
    user = [{"role": "user", "content": "hi"}]
    cases = {
        "bad json": _post(process, b"{not json"),
        "not an object": _post(process, b"[1, 2]"),
        "no messages": _post(process, {"model": "helper", "messages": []}),
        "unknown agent route": _post(
            process, {"model": "x", "messages": user}, path="/agents/nobody/chat/completions"
        ),
        "session id": _post(
            process,
            {"model": "helper", "messages": user, "metadata": {"session_id": "../etc/passwd"}},
        ),
        "long session id": _post(
            process, {"model": "helper", "messages": user, "metadata": {"session_id": "x" * 129}}
        ),
        "last not user": _post(
            process,
            {"model": "helper", "messages": [*user, {"role": "assistant", "content": "hello"}]},
        ),
        "image": _post(
            process,
            {
                "model": "helper",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "data:,"}}],
                    }
                ],
            },
        ),
        "n": _post(process, {"model": "helper", "messages": user, "n": 2}),
        "tools": _post(
            process,
            {
                "model": "helper",
                "messages": user,
                "tools": [{"type": "function", "function": {"name": "x"}}],
            },
        ),
    }
    summary = {name: _error(answer) for name, answer in cases.items()}
    bad = "invalid_request_error"
    assert summary == {
        "bad json": (
            400,
            bad,
            "the request body is not valid JSON: unexpected character, expected a string "
            "key: line 1 column 2 (char 1)",
            "invalid_json",
        ),
        "not an object": (400, bad, "the request body must be a JSON object", "invalid_body"),
        "no messages": (
            400,
            bad,
            "invalid request: messages: List should have at least 1 item after validation, not 0",
            "invalid_request",
        ),
        "unknown agent route": (
            404,
            "not_found_error",
            "no agent named 'nobody' is served here; the agents you may call: helper",
            "model_not_found",
        ),
        "session id": (
            400,
            bad,
            "invalid request: metadata: metadata.session_id must be 1-128 "
            "characters of A-Z a-z 0-9 . _ - (and not contain '..')",
            "invalid_request",
        ),
        "long session id": (
            400,
            bad,
            "invalid request: metadata: metadata.session_id must be "
            "1-128 characters of A-Z a-z 0-9 . _ - (and not contain '..')",
            "invalid_request",
        ),
        "last not user": (
            400,
            bad,
            "the last message must be the user's (role: user)",
            "invalid_messages",
        ),
        "image": (
            400,
            bad,
            "messages.0: only text content is supported, not 'image_url' parts",
            "unsupported_content",
        ),
        "n": (
            400,
            bad,
            "invalid request: n: an agent gives one answer: n must be 1",
            "invalid_request",
        ),
        "tools": (
            400,
            bad,
            "invalid request: tools: the agent runs its own tools; a request cannot add tools",
            "invalid_request",
        ),
    }


def test_too_large_bodies_are_413(served: tuple[Process, Path]) -> None:
    process, _ = served
    big = {"model": "helper", "messages": [{"role": "user", "content": "x" * (1024 * 1024)}]}
    answer = _post(process, big)
    assert _error(answer) == (
        413,
        "request_too_large",
        "the request body is over 1048576 bytes, this server's limit "
        "(webagents serve --max-body-mb raises it)",
        "request_too_large",
    )

    def chunked() -> Iterator[bytes]:  # no Content-Length: the limit applies as bytes arrive
        yield b'{"model": "helper", "messages": [{"role": "user", "content": "'
        for _ in range(20):
            yield b"y" * 65536
        yield b'"}]}'

    streamed = httpx.post(f"{process.url}/v1/chat/completions", content=chunked(), timeout=30)
    assert _error(streamed)[:2] == (413, "request_too_large")


def test_a_failing_model_is_502_without_internals(served: tuple[Process, Path]) -> None:
    process, _ = served
    answer = _post(
        process,
        {"model": "helper", "messages": [{"role": "user", "content": "explode"}]},
        {"Authorization": f"Bearer {KEYS['ALICE_KEY']}"},
    )
    assert _error(answer) == (
        502,
        "server_error",
        "the agent's model endpoint failed; try again later",
        "model_error",
    )
    assert "127.0.0.1" not in answer.text
    stream = _post(
        process,
        {"model": "helper", "stream": True, "messages": [{"role": "user", "content": "explode"}]},
    )
    events = [line for line in stream.text.splitlines() if line.startswith("data: ")]
    assert json.loads(events[-2].removeprefix("data: ")) == {
        "error": {
            "message": "the agent's model endpoint failed; try again later",
            "type": "server_error",
            "param": None,
            "code": "model_error",
        }
    }
    assert events[-1] == "data: [DONE]"


def test_serve_health_and_models_answer_and_unknown_routes_are_404_or_405(
    served: tuple[Process, Path],
) -> None:
    process, _ = served
    assert httpx.get(f"{process.url}/health").json() == {"status": "ok", "agents": 1}
    listed = caller(f"{process.url}/v1", "anonymous").models.list()
    assert [(m.id, m.owned_by) for m in listed.data] == [("helper", "webagents")]
    missing = httpx.get(f"{process.url}/v2/nothing")
    assert _error(missing) == (
        404,
        "not_found_error",
        "there is nothing at /v2/nothing",
        "not_found",
    )
    wrong_method = httpx.get(f"{process.url}/v1/chat/completions")
    assert _error(wrong_method)[:2] == (405, "invalid_request_error")


def _events(record: Path) -> list[str]:
    return record.read_text().splitlines() if record.exists() else []


def test_a_client_that_disconnects_mid_stream_stops_the_run(served: tuple[Process, Path]) -> None:
    process, record = served
    before = _events(record)
    body = {"model": "helper", "stream": True, "messages": [{"role": "user", "content": "wait"}]}
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", f"{process.url}/v1/chat/completions", json=body) as answer:
            lines = answer.iter_lines()  # kept: dropping the iterator would close the stream
            next(lines)  # the stream has begun
            process.wait_until(lambda: _events(record)[len(before) :] == ["wait started"])
        # leaving the block closes the connection mid-answer
    process.wait_until(lambda: _events(record)[len(before) :] == ["wait started", "wait cancelled"])


def test_a_client_that_disconnects_before_the_answer_stops_the_run(
    served: tuple[Process, Path],
) -> None:
    process, record = served
    before = _events(record)
    body = json.dumps({"model": "helper", "messages": [{"role": "user", "content": "wait"}]})
    host, port = process.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        process.wait_until(lambda: _events(record)[len(before) :] == ["wait started"])
    process.wait_until(lambda: _events(record)[len(before) :] == ["wait started", "wait cancelled"])


def test_a3_an_agent_without_verifiers_says_so_and_refuses_credentials(
    tmp_path: Path, model_server: ScriptedServer
) -> None:
    write(
        tmp_path / "open" / "AGENT.md",
        "---\nmodel: openai/m\nskills:\n  - webagents.testing:ProbeSkill\n---\nOpen to all.\n",
    )
    env = child_env(tmp_path, OPENAI_BASE_URL=model_server.base_url)
    with running(["serve", str(tmp_path / "open")], env) as process:
        assert (
            "agent 'open' verifies no one (it has no access: block): every caller is "
            "anonymous, reads shared notes, writes nothing, and no conversation is kept"
        ) in process.output
        assert caller_seen(process, "anonymous", "open")["kind"] == "anonymous"
        refused = _post(
            process,
            {"model": "open", "messages": [{"role": "user", "content": "x"}]},
            {"Authorization": "Bearer some-key"},
        )
        assert refused.status_code == 401


def test_serve_refuses_to_start_when_a_key_is_missing(tmp_path: Path) -> None:
    import subprocess

    from .conftest import webagents_command

    write(
        tmp_path / "a" / "AGENT.md",
        "---\nmodel: openai/m\naccess:\n  keys:\n"
        "    alice@example.com: env:ALICE_KEY_NOT_SET\n---\n",
    )
    done = subprocess.run(
        [webagents_command(), "serve", str(tmp_path / "a"), "--offline", "--port", "0"],
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().endswith(
        "access.keys['alice@example.com'] is env:ALICE_KEY_NOT_SET, but the environment "
        "variable ALICE_KEY_NOT_SET is not set"
    )


def test_a1_the_credential_is_judged_before_the_rest_of_the_request(
    served: tuple[Process, Path],
) -> None:
    process, _ = served
    wrong = {"Authorization": "Bearer not-a-key"}
    bad_body = {"model": "helper", "messages": [], "metadata": {"session_id": "../x"}}
    assert _post(process, bad_body, wrong).status_code == 401
    assert _post(process, bad_body, wrong, "/agents/helper/chat/completions").status_code == 401
    assert _post(process, bad_body).status_code == 400  # anonymous: the body's problems


def test_concurrent_callers_each_get_their_own_caller(
    served: tuple[Process, Path], identity: tuple[Identity, AppServer]
) -> None:
    """Many requests at once: nothing about one caller leaks into another's answer."""
    from concurrent.futures import ThreadPoolExecutor

    process, _ = served
    credentials = {
        KEYS["HELPER_OWNER_KEY"]: "owner",
        KEYS["ALICE_KEY"]: "alice@example.com",
        BOB_KEY: "bob@example.com",
        identity[0].token(email="erin@example.com"): "erin@example.com",
        "anonymous": "anonymous",
    }
    work = [key for key in credentials for _ in range(8)]

    def seen(key: str) -> tuple[str, str]:
        caller = caller_seen(process, key)
        return key, caller["identity"] or caller["kind"]

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(seen, work))
    assert len(results) == 40
    assert all(credentials[key] == who for key, who in results)


def test_a1_two_credentials_in_one_request_are_refused(served: tuple[Process, Path]) -> None:
    process, _ = served
    for headers in (
        [("Authorization", "Bearer anonymous"), ("Authorization", "Bearer wrong")],
        [("Authorization", f"Bearer {KEYS['HELPER_OWNER_KEY']}"), ("Authorization", "Bearer x")],
        [
            ("Authorization", f"Bearer {KEYS['TELEGRAM_BRIDGE_KEY']}"),
            ("X-Webagents-Channel-Sender", "1"),
            ("X-Webagents-Channel-Sender", "2"),
        ],
    ):
        answer = httpx.post(f"{process.url}/v1/chat/completions", json=HELLO, headers=headers)
        assert answer.status_code == 401, headers
        assert answer.json()["error"]["message"].startswith("send one ")


def _who(process: Process, headers: list[tuple[str, str]]) -> tuple[int, Any]:
    """The caller a request with these headers is (kind, identity, namespace), or its
    refusal's status and message."""
    answer = httpx.post(
        f"{process.url}/v1/chat/completions", json=HELLO, headers=headers, timeout=30
    )
    if answer.status_code != 200:
        return answer.status_code, answer.json()["error"]["message"]
    seen = json.loads(answer.json()["choices"][0]["message"]["content"].removeprefix("caller: "))
    return 200, (seen["kind"], seen["identity"], seen["namespace"])


def test_a1_serve_verifies_or_refuses_an_api_key_header(
    served: tuple[Process, Path], identity: tuple[Identity, AppServer]
) -> None:
    """A1: `api-key: <key>` (as Azure OpenAI's clients send) is a credential exactly like
    x-api-key: verified, or refused with 401, never served as anonymous; `anonymous` is none;
    one that disagrees with Authorization or x-api-key, or two of it, are refused."""
    process, _ = served

    def send_one(first: str, second: str) -> tuple[int, str]:
        return (
            401,
            f"the {first} and {second} headers present different credentials: send one of them",
        )

    alice = ("verified", "alice@example.com", "caller:alice@example.com")
    assert _who(process, [("api-key", KEYS["ALICE_KEY"])]) == (200, alice)
    assert _who(process, [("Api-Key", KEYS["HELPER_OWNER_KEY"])]) == (200, ("owner", None, "owner"))
    assert _who(process, [("api-key", identity[0].token())]) == (
        200,
        ("verified", "dana@example.com", f"caller:jwt:{ISSUER}#dana@example.com"),
    )
    assert _who(process, [("api-key", "anonymous")]) == (200, ("anonymous", None, None))
    assert _who(process, [("api-key", "wrong")]) == (
        401,
        "the bearer token is not valid for this agent",
    )
    assert _who(process, [("api-key", KEYS["ALICE_KEY"]), ("api-key", KEYS["ALICE_KEY"])]) == (
        401,
        "send one api-key header, not several",
    )
    assert _who(process, [("x-api-key", KEYS["ALICE_KEY"]), ("api-key", KEYS["ALICE_KEY"])]) == (
        200,
        alice,
    )
    assert _who(process, [("x-api-key", KEYS["ALICE_KEY"]), ("api-key", "anonymous")]) == send_one(
        "x-api-key", "api-key"
    )
    assert _who(
        process, [("Authorization", "Bearer anonymous"), ("api-key", KEYS["ALICE_KEY"])]
    ) == send_one("Authorization", "api-key")

    # The official client always sends Authorization: a key in api-key as well must agree.
    assert caller_seen(process, KEYS["ALICE_KEY"], **{"api-key": KEYS["ALICE_KEY"]})[
        "namespace"
    ] == ("caller:alice@example.com")
    with pytest.raises(openai.AuthenticationError) as caught:
        caller_seen(process, "anonymous", **{"api-key": KEYS["ALICE_KEY"]})
    assert caught.value.status_code == 401
    assert caught.value.body == {
        "message": send_one("Authorization", "api-key")[1],
        "type": "authentication_error",
        "param": None,
        "code": "invalid_credential",
    }


def test_a1_serve_verifies_or_refuses_an_x_api_key_header(
    served: tuple[Process, Path], identity: tuple[Identity, AppServer]
) -> None:
    """A1: `x-api-key: <key>` (as Anthropic-style clients send) is a credential like a bearer
    key; `anonymous` is none; one that disagrees with Authorization, or two, are refused."""
    process, _ = served

    alice = ("verified", "alice@example.com", "caller:alice@example.com")
    send_one = (
        "the Authorization and x-api-key headers present different credentials: send one of them"
    )
    assert _who(process, [("x-api-key", KEYS["ALICE_KEY"])]) == (200, alice)
    assert _who(process, [("X-Api-Key", KEYS["HELPER_OWNER_KEY"])]) == (
        200,
        ("owner", None, "owner"),
    )
    assert _who(process, [("x-api-key", identity[0].token())]) == (
        200,
        ("verified", "dana@example.com", f"caller:jwt:{ISSUER}#dana@example.com"),
    )
    assert _who(process, [("x-api-key", "anonymous")]) == (200, ("anonymous", None, None))
    assert _who(process, [("x-api-key", "wrong")]) == (
        401,
        "the bearer token is not valid for this agent",
    )
    assert _who(process, [("x-api-key", KEYS["ALICE_KEY"]), ("x-api-key", KEYS["ALICE_KEY"])]) == (
        401,
        "send one x-api-key header, not several",
    )
    assert _who(
        process, [("Authorization", "Bearer anonymous"), ("x-api-key", KEYS["ALICE_KEY"])]
    ) == (
        401,
        send_one,
    )

    # The official client always sends Authorization: a key in x-api-key as well must agree.
    assert caller_seen(process, KEYS["ALICE_KEY"], **{"x-api-key": KEYS["ALICE_KEY"]})[
        "namespace"
    ] == ("caller:alice@example.com")
    with pytest.raises(openai.AuthenticationError) as caught:
        caller_seen(process, "anonymous", **{"x-api-key": KEYS["ALICE_KEY"]})
    assert caught.value.status_code == 401
    assert caught.value.body == {
        "message": send_one,
        "type": "authentication_error",
        "param": None,
        "code": "invalid_credential",
    }


def test_json_that_cannot_be_read_is_400_not_500(served: tuple[Process, Path]) -> None:
    process, _ = served
    huge_number = b'{"model": "helper", "n": ' + b"9" * 5000 + b"}"
    deep = b'{"model": "helper", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    expected = {
        huge_number: "number is infinity when parsed as double: line 1 column 26 (char 25)",
        deep: "depth limit exceeded: line 1 column 1050 (char 1049)",
    }
    for body, reason in expected.items():
        assert _error(_post(process, body)) == (
            400,
            "invalid_request_error",
            f"the request body is not valid JSON: {reason}",
            "invalid_json",
        )


def test_the_agent_route_needs_no_model_field(served: tuple[Process, Path]) -> None:
    process, _ = served
    owner = {"Authorization": f"Bearer {KEYS['HELPER_OWNER_KEY']}"}
    body = {"messages": [{"role": "user", "content": "hi"}]}
    answer = _post(process, body, owner, "/agents/helper/chat/completions")
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == "helper"
    missing = _post(process, body, owner)  # /v1 needs it: it names the agent there
    assert missing.status_code == 400
    assert missing.json()["error"]["message"] == (
        "invalid request: model: the agent's name is required"
    )


def test_serve_the_seeds_request_reaches_the_one_served_agent(
    served: tuple[Process, Path],
) -> None:
    """The seeds send a provider's model name and a session id; serve of one agent answers it."""
    process, _ = served
    replies = [
        client(process, key).chat.completions.create(
            model="openai/gpt-4o-mini",
            messages=[{"role": "user", "content": "who am I?"}],
            metadata={"session_id": "seed-1"},
        )
        for key in (KEYS["ALICE_KEY"], "anonymous")
    ]
    assert [
        (r.model, json.loads((r.choices[0].message.content or "")[8:])["kind"]) for r in replies
    ] == [
        ("helper", "verified"),
        ("helper", "anonymous"),
    ]
    with pytest.raises(openai.AuthenticationError):
        client(process, "wrong").chat.completions.create(
            model="openai/gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
        )
