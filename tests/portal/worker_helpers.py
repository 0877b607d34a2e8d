"""`webagents portal worker` processes for the tests of issue 23 (test_portal_worker*.py):
an OpenAI-compatible embedding endpoint served by the test (`--embeddings openai:MODEL`), so
that a test sees which process asked to embed what, and a worker and an agent started."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from .account_helpers import new_user_key
from .memory_helpers import SynonymEmbedder
from .processes import Child, Served

URL = "/api/storage/memory-scoped"
MODEL = "openai:test-synonyms"


class Endpoint:
    """POST /v1/embeddings with SynonymEmbedder's vectors; `texts` keeps the notes asked for
    (keys start with "n"). With `meet`, the first two requests that carry notes wait for each
    other: both answer only once two workers are embedding at the same moment (or after 60 s,
    marked as never met)."""

    def __init__(self, *, meet: bool = False) -> None:
        self.meet = meet
        self.texts: list[str] = []
        self.met: bool | None = None
        self._lock = threading.Lock()
        self._meeting = threading.Barrier(2, timeout=60)
        self._waited = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                answer = json.dumps(endpoint.answer(body["input"], body["model"])).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def answer(self, texts: list[str], model: str) -> dict[str, Any]:
        notes = [text for text in texts if text.startswith("n")]
        if notes:
            with self._lock:
                self.texts.extend(notes)
                meets = self.meet and self._waited < 2
                self._waited += 1
            if meets:
                try:
                    self._meeting.wait()
                    self.met = self.met is not False
                except threading.BrokenBarrierError:
                    self.met = False
        vectors = SynonymEmbedder().embed(texts)
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        return {"object": "list", "data": data, "model": model}

    def __enter__(self) -> Endpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._meeting.abort()
        self._server.shutdown()
        self._server.server_close()


def start_worker(tmp_path: Path, endpoint: Endpoint, database: str, *more: str) -> Child:
    """A `portal worker` embedding with `endpoint`, once it says it is running; `more`: its
    further options."""
    child = Child(
        tmp_path,
        "portal",
        "worker",
        "--embeddings",
        MODEL,
        "--database",
        database,
        *more,
        env={"OPENAI_BASE_URL": endpoint.url},
    )
    child.wait_for(r"webagents portal worker: running")
    return child


def make_agent(tmp_path: Path, served: Served, database: str) -> tuple[dict[str, str], str]:
    """A published agent's key header and id (alice's agent, made over HTTP)."""
    user_key = new_user_key(database, "alice")
    made = httpx.post(
        f"{served.url}/api/agents",
        headers={"Authorization": f"Bearer {user_key}"},
        json={"name": "helper"},
    )
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['rawApiKey']}"}, made.json()["agent"]["id"]


def until(check: Any, seconds: float = 90) -> bool:
    """Whether `check()` came true within `seconds` (a guard; it is awaited, not timed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())
