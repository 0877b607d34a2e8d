"""The portal's FastAPI app: the features' routers, and one error handler for the API (JSON,
OpenAI-shaped) and one for the pages (the message on a page).

The app keeps nothing another portal process would need: sessions, keys and sign-in counts
are in the database, so any number of processes can serve one PostgreSQL.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import cast
from urllib.parse import quote

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from sqlalchemy import Engine
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..openai_wire import error_body
from ..server.api_errors import error_type
from .accounts import api as accounts_api
from .accounts import pages as accounts_pages
from .accounts.auth import SignInRequired
from .agents import api as agents_api
from .agents import pages as agents_pages
from .body_limit import BodyLimit
from .chats import api as chats_api
from .chats import pages as chats_pages
from .cli_login import api as cli_login_api
from .cli_login import pages as cli_login_pages
from .connect import api as connect_api
from .connect import pages as connect_pages
from .connect.api import is_relayed_path
from .connect.relay import Relay
from .db import gate, outage
from .db.engine import make_engine, make_reading_sessions, make_sessions
from .embeddings import Embedder, make_embedder
from .errors import PortalError
from .memory import api as memory_api
from .memory import changes as memory_changes
from .memory import forget_pages as memory_forget_pages
from .memory import pages as memory_pages
from .memory.embedding_queue import EmbeddingWorker
from .refusal import EarlyRefusal
from .settings import PortalSettings
from .static import router as static_router
from .tokens import api as tokens_api
from .web import API_HEADERS, PAGE_HEADERS, SESSION_COOKIE, render

log = logging.getLogger("webagents.portal")


_FROM_SETTINGS: object = object()
# Threads beyond the database gate's slots, for the sync work that holds no slot.
SPARE_THREADS = 16


def create_app(
    settings: PortalSettings,
    *,
    engine: Engine | None = None,
    embedder: Embedder | object | None = _FROM_SETTINGS,
    embedding_worker: bool = True,
) -> FastAPI:
    """The app on an already migrated database (see db.migrate.upgrade). `embedder`: the
    memory store's (default: settings.embeddings'); with one, a worker thread embeds notes
    while the app runs, unless `embedding_worker` is off (tests work the queue themselves)."""
    chosen: Embedder | None
    if embedder is _FROM_SETTINGS:
        chosen = make_embedder(settings.embeddings)
    else:
        chosen = cast("Embedder | None", embedder)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # A request holding a gate's slot must always find a thread for its sync parts (a
        # dependency, the endpoint), or it holds its connection, and on SQLite the write
        # lock, while it waits for one: the pool of threads outnumbers the slots.
        threads = anyio.to_thread.current_default_thread_limiter()
        threads.total_tokens = max(threads.total_tokens, settings.db_gate.slots + SPARE_THREADS)
        # The loop the gate's locks live in, for a thread's turn among the writers
        # (background.py: the embedding worker's, gate.DatabaseGate.thread_turn).
        app.state.loop = asyncio.get_running_loop()
        worker = None
        if chosen is not None and embedding_worker:
            worker = EmbeddingWorker(
                app.state.sessions, chosen, writers_turn=app.state.writers_turn
            )
            worker.start()
        if worker is not None:  # else the one `portal serve` starts (background.py), if any
            app.state.embedding_worker = worker
        app.state.relay.start()
        try:
            yield
        finally:
            await app.state.relay.stop()
            if worker is not None:
                worker.stop()
            app.state.loop = None

    app = _PortalApp(
        title="webagents portal",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.engine = engine if engine is not None else make_engine(settings)
    app.state.sessions = make_sessions(app.state.engine)
    app.state.reading_sessions = make_reading_sessions(app.state.engine)
    app.state.gate = gate.DatabaseGate(settings.db_gate, one_writer=settings.is_sqlite)
    app.state.outage = outage.Outage()
    app.state.embedder = chosen
    app.state.embedding_worker = None
    app.state.loop = None
    # The embedding worker's turn among the requests' writers (SQLite), in the loop the
    # lifespan records (none before it runs): gate.DatabaseGate.thread_turn.
    app.state.writers_turn = lambda: app.state.gate.thread_turn(app.state.loop)
    app.state.relay = Relay(app.state.sessions, settings)
    memory_changes.listen(app.state.sessions, app.state.relay.notices.from_thread)

    # The routers agents call most first: FastAPI tries them in order, and no path of these
    # two is another router's, so the order decides nothing but the time a match takes.
    app.include_router(memory_api.router)
    app.include_router(chats_api.router)
    app.include_router(accounts_api.router)
    app.include_router(accounts_pages.router)
    app.include_router(tokens_api.router)
    app.include_router(cli_login_api.router)
    app.include_router(cli_login_pages.router)
    app.include_router(agents_api.router)
    app.include_router(agents_pages.router)
    app.include_router(chats_pages.router)
    app.include_router(connect_api.router)
    app.include_router(connect_pages.router)
    app.include_router(memory_pages.router)
    app.include_router(memory_forget_pages.router)
    app.include_router(static_router)

    app.add_middleware(_Headers)

    # Outermost (added last): a body over the cap is refused before a route parses it.
    app.add_middleware(BodyLimit, cap=settings.max_body_bytes)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.exception_handler(PortalError)
    async def _portal_error(request: Request, exc: PortalError) -> Response:
        retry = exc.retry_after if isinstance(exc, gate.Busy) else None
        return _answer(
            request,
            exc.status,
            exc.message,
            exc.code,
            sign_in=isinstance(exc, SignInRequired),
            retry_after=retry,
        )

    async def _unavailable(request: Request, exc: Exception) -> Response:
        app.state.outage.began(exc)
        return _answer(
            request,
            503,
            "the portal's database is unavailable right now, so nothing was done; try again "
            f"in {outage.RETRY_AFTER_SECONDS} s",
            "database_unavailable",
            retry_after=outage.RETRY_AFTER_SECONDS,
        )

    for failure in outage.UNAVAILABLE:
        app.add_exception_handler(failure, _unavailable)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        message = str(exc.detail) if exc.status_code != 404 else "there is nothing here"
        return _answer(request, exc.status_code, message, None)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        return _answer(request, 400, f"the request is not valid: {problems}", "invalid_request")

    return app


class _PortalApp(FastAPI):
    """FastAPI, with the refusals of a full database gate answered before anything else
    (refusal.py), outside even Starlette's error middleware."""

    def build_middleware_stack(self) -> ASGIApp:
        settings: PortalSettings = self.state.settings
        return EarlyRefusal(
            super().build_middleware_stack(),
            self.state.gate,
            _refused_early,
            settings.max_body_bytes,
        )


def _refused_early(path: str) -> bool:
    return _is_api_path(path) and path != "/health"


class _Headers:
    """The security headers of pages and of the API, added to each answer's start (unless the
    endpoint set its own). Plain ASGI, not `@app.middleware("http")`: that one runs every
    request's endpoint in a task of its own and streams the answer through a memory channel,
    about a millisecond a request here."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        wanted = PAGE_HEADERS if not _is_api_path(path) else API_HEADERS
        if path.startswith("/.well-known/"):  # public keys, cached on purpose
            wanted = {"X-Content-Type-Options": "nosniff"}

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in wanted.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, sending)


def _is_api(request: Request) -> bool:
    return _is_api_path(request.url.path)


def _is_api_path(path: str) -> bool:
    if is_relayed_path(path):
        return True  # Portal Connect's public endpoint: OpenAI-shaped, as the API
    return path.startswith(("/api/", "/.well-known/")) or path == "/health"


def _answer(
    request: Request,
    status: int,
    message: str,
    code: str | None,
    *,
    sign_in: bool = False,
    retry_after: int | None = None,
) -> Response:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    if _is_api(request):
        if status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return JSONResponse(
            error_body(message, error_type(status), code), status_code=status, headers=headers
        )
    if sign_in:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/signin?next={quote(target, safe='')}", status_code=303)
    title = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
    if status == 404 and "/api/" in message:  # words for an API's caller, not a person
        message = "there is nothing here, or it is not yours: see your agents and chats above"
    # The error page knows no user (no database here): a browser with a session cookie is
    # shown the signed-in links, not "Sign in".
    signed_in = bool(request.cookies.get(SESSION_COOKIE))
    page = render(
        request, "error.html", status=status, error=message, title=title, signed_in=signed_in
    )
    page.headers.update(headers)
    return page
