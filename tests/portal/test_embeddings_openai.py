"""`--embeddings openai[:MODEL]`: any OpenAI-compatible /v1/embeddings endpoint (P5, M12).

A loopback server plays the endpoint: it answers each text with the vector [len(text), 1, 2]
(not of unit length, and the answer's items in reverse order, with their indexes), or refuses
as it is told.
"""

from __future__ import annotations

import asyncio
import math
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from webagents.errors import ConfigError
from webagents.portal.embeddings import EmbeddingError, make_embedder
from webagents.portal.embeddings.remote import NO_ENDPOINT, OpenAIEmbedder
from webagents.testing import AppServer


class FakeEndpoint:
    """The /v1/embeddings route; `answer` replaces the normal answer while it is set."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        self.answer: Response | None = None
        self.hold = False

    async def embeddings(self, request: Request) -> Response:
        body = await request.json()
        self.bodies.append(body)
        self.authorizations.append(request.headers.get("authorization"))
        if self.hold:
            await asyncio.sleep(30)  # longer than the client waits; the server's stop ends it
        if self.answer is not None:
            return self.answer
        data = [
            {"object": "embedding", "index": i, "embedding": [len(text), 1, 2]}
            for i, text in enumerate(body["input"])
        ]
        return JSONResponse({"object": "list", "data": data[::-1], "model": body["model"]})


@pytest.fixture(autouse=True)
def closed_after() -> Iterator[None]:
    """Every OpenAIEmbedder a test makes is closed at its end (its keep-alive connections)."""
    made: list[OpenAIEmbedder] = []
    original = OpenAIEmbedder.__init__

    def init(self: OpenAIEmbedder, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(OpenAIEmbedder, "__init__", init)
        yield
    for embedder in made:
        embedder.close()


@pytest.fixture
def endpoint() -> Iterator[tuple[FakeEndpoint, str]]:
    fake = FakeEndpoint()
    app = Starlette(routes=[Route("/v1/embeddings", fake.embeddings, methods=["POST"])])
    with AppServer(app) as server:
        yield fake, f"{server.url}/v1"


def _unit(vector: list[float]) -> list[float]:
    length = math.sqrt(sum(x * x for x in vector))
    return [x / length for x in vector]


def _close(a: list[list[float]], b: list[list[float]]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(abs(p - q) < 1e-12 for p, q in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True)
    )


def test_p5_openai_embedder_posts_the_texts_and_normalises_the_answer(
    endpoint: tuple[FakeEndpoint, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, base_url = endpoint
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    embedder = make_embedder("openai:nomic-embed-text")
    assert embedder is not None
    assert embedder.name == "openai:nomic-embed-text"
    vectors = embedder.embed(["tea", "a longer note", ""])
    assert _close(vectors, [_unit([3, 1, 2]), _unit([13, 1, 2]), _unit([1, 1, 2])])
    # The empty text goes as a space: OpenAI refuses an empty input.
    assert fake.bodies == [{"model": "nomic-embed-text", "input": ["tea", "a longer note", " "]}]
    assert fake.authorizations == ["Bearer sk-test"]
    assert embedder.dimensions == 3  # learnt from the answer: no second request
    assert len(fake.bodies) == 1
    assert embedder.embed([]) == []
    assert len(fake.bodies) == 1


def test_p5_openai_embedder_asks_the_dimensions_of_an_unknown_model_once(
    endpoint: tuple[FakeEndpoint, str],
) -> None:
    fake, base_url = endpoint
    embedder = OpenAIEmbedder("my-model", base_url=base_url)
    assert (embedder.dimensions, embedder.dimensions) == (3, 3)
    assert fake.bodies == [{"model": "my-model", "input": ["dimensions"]}]
    assert fake.authorizations == [None]  # an endpoint named in code gets no key it was not given


def test_p5_openai_embedder_default_model_and_known_dimensions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    embedder = make_embedder("openai")
    assert embedder is not None
    assert (embedder.name, embedder.dimensions) == ("openai:text-embedding-3-small", 1536)
    assert isinstance(embedder, OpenAIEmbedder)
    assert embedder.base_url == "https://api.openai.com/v1"  # not asked: nothing was embedded


def test_p5_openai_embedder_sends_long_lists_in_batches_and_keeps_their_order(
    endpoint: tuple[FakeEndpoint, str],
) -> None:
    fake, base_url = endpoint
    embedder = OpenAIEmbedder("m", base_url=base_url)
    texts = ["x" * (i % 7 + 1) for i in range(300)]
    vectors = embedder.embed(texts)
    assert [len(body["input"]) for body in fake.bodies] == [256, 44]
    assert _close(vectors, [_unit([len(text), 1, 2]) for text in texts])


def test_p5_openai_embedder_without_an_endpoint_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError) as refused:
        make_embedder("openai:text-embedding-3-large")
    assert str(refused.value) == NO_ENDPOINT


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (401, {"error": {"message": "bad key"}}, "refused the API key: check OPENAI_API_KEY"),
        (
            404,
            {"error": {"message": "model not found"}},
            "answered 404 for model 'm': check the model's name in --embeddings openai:MODEL "
            "and that the server serves /embeddings",
        ),
        (429, {"error": {"message": "Rate limit reached"}}, "answered 429: Rate limit reached"),
        (500, "upstream exploded", "answered 500: upstream exploded"),
    ],
)
def test_p5_openai_embedder_refusals_are_embedding_errors(
    endpoint: tuple[FakeEndpoint, str], status: int, body: Any, message: str
) -> None:
    fake, base_url = endpoint
    fake.answer = (
        JSONResponse(body, status_code=status)
        if isinstance(body, dict)
        else Response(body, status_code=status)
    )
    with pytest.raises(EmbeddingError) as refused:
        OpenAIEmbedder("m", base_url=base_url, api_key="sk-wrong").embed(["tea"])
    assert str(refused.value) == f"the embeddings endpoint at {base_url} {message}"
    assert fake.authorizations == ["Bearer sk-wrong"]


SHAPE = (
    "check that it speaks the OpenAI embeddings format ({data: [{index, embedding: [numbers]}]})"
)


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (Response("<html>", media_type="text/html"), "no JSON"),
        (JSONResponse({"data": "nope"}), "no list of vectors for 2 texts"),
        (JSONResponse([1, 2]), "no list of vectors for 2 texts"),
        (JSONResponse({"data": [{"index": 0, "embedding": [1.0]}]}), "1 vectors for 2 texts"),
        (
            JSONResponse(
                {"data": [{"index": 0, "embedding": [1]}, {"index": 0, "embedding": [1]}]}
            ),
            "data[1].index 0, not a text's place",
        ),
        (
            JSONResponse(
                {"data": [{"index": 0, "embedding": [1]}, {"index": 2, "embedding": [1]}]}
            ),
            "data[1].index 2, not a text's place",
        ),
        (
            JSONResponse({"data": [{"embedding": [1, 0]}, {"embedding": ["a", "b"]}]}),
            "an embedding that is not a list of numbers",
        ),
        (
            JSONResponse({"data": [{"embedding": [1, 0]}, {"embedding": [True, False]}]}),
            "an embedding that is not a list of numbers",
        ),
        (
            JSONResponse({"data": [{"embedding": [1, 0]}, {"embedding": []}]}),
            "an embedding that is not a list of numbers",
        ),
        (
            JSONResponse({"data": [{"embedding": [1, 0]}, {"embedding": [0, 0]}]}),
            "an embedding of length 0 or not finite",
        ),
        (
            Response(
                '{"data": [{"embedding": [1, 0]}, {"embedding": [1e400, 0]}]}',
                media_type="application/json",
            ),
            "an embedding of length 0 or not finite",
        ),
        (
            JSONResponse({"data": [{"embedding": [1, 0]}, {"embedding": [1, 0, 0]}]}),
            "vectors of 3 numbers where the model's have 2",
        ),
    ],
)
def test_p5_openai_embedder_refuses_a_malformed_answer(
    endpoint: tuple[FakeEndpoint, str], answer: Response, problem: str
) -> None:
    fake, base_url = endpoint
    fake.answer = answer
    with pytest.raises(EmbeddingError) as refused:
        OpenAIEmbedder("m", base_url=base_url).embed(["one", "two"])
    assert (
        str(refused.value) == f"the embeddings endpoint at {base_url} answered {problem}; {SHAPE}"
    )


def test_p5_openai_embedder_refuses_vectors_whose_size_changed(
    endpoint: tuple[FakeEndpoint, str],
) -> None:
    fake, base_url = endpoint
    embedder = OpenAIEmbedder("m", base_url=base_url)
    assert embedder.embed(["a"]) == [_unit([1, 1, 2])]
    fake.answer = JSONResponse({"data": [{"index": 0, "embedding": [1, 2, 3, 4]}]})
    with pytest.raises(EmbeddingError) as refused:
        embedder.embed(["a"])
    assert str(refused.value) == (
        f"the embeddings endpoint at {base_url} answered vectors of 4 numbers where the model's "
        f"have 3; {SHAPE}"
    )


def test_p5_openai_embedder_unreachable_or_silent_endpoint_is_an_embedding_error(
    endpoint: tuple[FakeEndpoint, str],
) -> None:
    fake, base_url = endpoint
    fake.hold = True
    with pytest.raises(EmbeddingError) as refused:
        OpenAIEmbedder("m", base_url=base_url, timeout=0.5).embed(["tea"])
    assert str(refused.value) == f"the embeddings endpoint at {base_url} did not answer in time"
    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    with pytest.raises(EmbeddingError) as unreachable:
        OpenAIEmbedder("m", base_url=closed).embed(["tea"])
    assert str(unreachable.value).startswith(f"cannot reach the embeddings endpoint at {closed} (")
    assert str(unreachable.value).endswith(
        "): check OPENAI_BASE_URL and that the server is running"
    )
