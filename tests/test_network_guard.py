"""The test suite itself cannot reach a real model: only loopback is reachable."""

import socket

import pytest

from webagents.errors import ModelError
from webagents.model import ModelRequest
from webagents.skills.openai import OpenAIModel


def test_non_loopback_connections_are_refused() -> None:
    with pytest.raises(OSError, match="tests may not reach the network"):
        socket.create_connection(("203.0.113.5", 443), timeout=1)


async def test_a_real_openai_endpoint_cannot_be_reached_by_accident() -> None:
    model = OpenAIModel("gpt-4o-mini", api_key="sk-test-not-real")
    with pytest.raises(
        ModelError, match=r"cannot reach the model endpoint at https://api\.openai\.com"
    ):
        await model.complete(ModelRequest([{"role": "user", "content": "hi"}]))
    await model.aclose()


def test_hostnames_outside_this_machine_do_not_resolve() -> None:
    with pytest.raises(OSError, match="tests may not reach the network"):
        socket.getaddrinfo("api.openai.com", 443)
    assert socket.getaddrinfo("127.0.0.1", 80)[0][4][0] == "127.0.0.1"
