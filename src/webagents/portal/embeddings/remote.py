"""`--embeddings openai[:MODEL]`: any OpenAI-compatible `/v1/embeddings` endpoint.

OpenAI itself, or vLLM, Ollama, llama.cpp's server, LiteLLM: chosen as the openai model
skill chooses, with OPENAI_BASE_URL (else OpenAI's) and OPENAI_API_KEY. Every failure is an
EmbeddingError that says what to check, for the store's worker to log and try again later; this
client itself tries once (a search waits on it).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from ...chat_completions import _error_message
from ...errors import ConfigError
from .errors import EmbeddingError

DEFAULT_MODEL = "text-embedding-3-small"
OPENAI_URL = "https://api.openai.com/v1"
NO_ENDPOINT = (
    "--embeddings openai needs an endpoint: set OPENAI_API_KEY (for OpenAI) or "
    "OPENAI_BASE_URL (for a compatible server such as vLLM, Ollama or llama.cpp)"
)
KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
BATCH = 256
"""Texts in one request (OpenAI takes up to 2048; smaller requests fail and retry smaller)."""


class OpenAIEmbedder:
    """Vectors from `POST {base_url}/embeddings`, normalised to unit length here."""

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        if base_url is None:
            # The environment's key goes only to the environment's endpoint (as OpenAIModel).
            base_url = os.environ.get("OPENAI_BASE_URL") or None
            api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
            if api_key is None and base_url is None:
                raise ConfigError(NO_ENDPOINT)
        self.model = model
        self.base_url = (base_url or OPENAI_URL).rstrip("/")
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(
            headers=headers, timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0))
        )
        self._dimensions: int | None = KNOWN_DIMENSIONS.get(model)
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    @property
    def dimensions(self) -> int:
        """Known for OpenAI's models; for another, asked of the endpoint once (one text)."""
        if self._dimensions is None:
            self.embed(["dimensions"])
        assert self._dimensions is not None
        return self._dimensions

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            vectors.extend(self._request(list(texts[start : start + BATCH])))
        return vectors

    def close(self) -> None:
        self._client.close()

    def _request(self, texts: list[str]) -> list[list[float]]:
        # OpenAI refuses an empty input string: a space means as little.
        body = {"model": self.model, "input": [text or " " for text in texts]}
        try:
            response = self._client.post(
                f"{self.base_url}/embeddings",
                content=json.dumps(body, ensure_ascii=False).encode("utf-8", "replace"),
            )
        except httpx.TimeoutException:
            raise EmbeddingError(
                f"the embeddings endpoint at {self.base_url} did not answer in time"
            ) from None
        except httpx.TransportError as exc:
            raise EmbeddingError(
                f"cannot reach the embeddings endpoint at {self.base_url} ({exc}): check "
                "OPENAI_BASE_URL and that the server is running"
            ) from None
        if response.status_code >= 400:
            raise self._refused(response.status_code, response.text)
        try:
            answer = response.json()
        except (ValueError, RecursionError):
            raise self._malformed("no JSON") from None
        return self._vectors(answer, len(texts))

    def _refused(self, status: int, text: str) -> EmbeddingError:
        if status == 401:
            return EmbeddingError(
                f"the embeddings endpoint at {self.base_url} refused the API key: check "
                "OPENAI_API_KEY"
            )
        if status == 404:
            return EmbeddingError(
                f"the embeddings endpoint at {self.base_url} answered 404 for model "
                f"{self.model!r}: check the model's name in --embeddings openai:MODEL and that "
                "the server serves /embeddings"
            )
        return EmbeddingError(
            f"the embeddings endpoint at {self.base_url} answered {status}: {_error_message(text)}"
        )

    def _malformed(self, what: str) -> EmbeddingError:
        return EmbeddingError(
            f"the embeddings endpoint at {self.base_url} answered {what}; check that it speaks "
            "the OpenAI embeddings format ({data: [{index, embedding: [numbers]}]})"
        )

    def _vectors(self, answer: Any, count: int) -> list[list[float]]:
        """The answer's vectors in the order of the texts, each normalised, or an error."""
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list) or len(data) != count:
            got = len(data) if isinstance(data, list) else "no list of"
            raise self._malformed(f"{got} vectors for {count} texts")
        vectors: list[list[float] | None] = [None] * count
        for position, item in enumerate(data):
            index = item.get("index", position) if isinstance(item, dict) else None
            vector = item.get("embedding") if isinstance(item, dict) else None
            if not isinstance(index, int) or not 0 <= index < count or vectors[index] is not None:
                raise self._malformed(f"data[{position}].index {index!r}, not a text's place")
            vectors[index] = _unit(vector, self._malformed)
        with self._lock:
            for vector in vectors:
                assert vector is not None  # every place was filled once (count and indexes)
                if self._dimensions is None:
                    self._dimensions = len(vector)
                if len(vector) != self._dimensions:
                    raise self._malformed(
                        f"vectors of {len(vector)} numbers where the model's have "
                        f"{self._dimensions}"
                    )
        return [vector for vector in vectors if vector is not None]


def _unit(vector: Any, error: Callable[[str], EmbeddingError]) -> list[float]:
    """`vector` scaled to length 1; a vector that is not numbers, or is all zeros, is refused."""
    if (
        not isinstance(vector, list)
        or not vector
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in vector)
    ):
        raise error("an embedding that is not a list of numbers")
    try:
        length = math.sqrt(math.fsum(float(x) * float(x) for x in vector))
    except OverflowError:  # an integer past float's range
        length = math.inf
    if not math.isfinite(length) or length == 0.0:
        raise error("an embedding of length 0 or not finite")
    return [float(x) / length for x in vector]
