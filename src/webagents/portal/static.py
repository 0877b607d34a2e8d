"""The pages' static files: the vendored Pico CSS (MIT, its licence beside it), the portal's
own stylesheet on top of it, and the small scripts of the owner's pages.

Served from a fixed list read once at import: no path from a request ever reaches the file
system, and no page loads anything from another origin (no CDN). The files change only with
the package, so a browser may keep them for a day; the portal's version in the URL the pages
use (`?v=`) makes a new release fetch them again.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import Response

from .. import __version__
from .errors import NotFound

_FOLDER = Path(__file__).with_name("static")
_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
_FILES = {
    name: (_FOLDER.joinpath(name).read_bytes(), _TYPES[Path(name).suffix])
    for name in ("pico.min.css", "portal.css", "copy.js")
}

router = APIRouter()


def static_url(name: str) -> str:
    """The URL of one static file, with the version that invalidates a browser's copy."""
    return f"/static/{name}?v={__version__}"


@router.get("/static/{name}")
def static_file(name: str) -> Response:
    found = _FILES.get(name)
    if found is None:
        raise NotFound("there is no such file")
    body, media_type = found
    return Response(body, media_type=media_type, headers={"Cache-Control": "public, max-age=86400"})
