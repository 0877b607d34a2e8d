"""A chat message's Markdown as safe HTML for the owner's pages and the web chat.

markdown-it-py (CommonMark and tables) with raw HTML off, so markup in a message is shown
as text; its output then goes through nh3 (an allow-list sanitizer) all the same, so that no
parser bug can let a script, a style or an event handler through. Images are not rendered:
they would load from another origin, which the pages' policy refuses anyway; their Markdown
stays as text. Links are to other sites only (http, https, mailto: a relative link in a
message would look like one of the portal's own), and open there without telling the
portal's address (no referrer).
"""

from __future__ import annotations

from collections.abc import Sequence

import nh3
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.renderer import RendererProtocol
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

# breaks: a chat message's line break is kept, as people wrote it.
_PARSER = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable("table")


def _image_as_text(
    renderer: RendererProtocol,
    tokens: Sequence[Token],
    idx: int,
    options: OptionsDict,
    env: EnvType,
) -> str:
    """An image's Markdown as it was written (its alt text and address), escaped."""
    token = tokens[idx]
    return escapeHtml(f"![{token.content}]({token.attrGet('src') or ''})")


_PARSER.add_render_rule("image", _image_as_text)

_TAGS = {
    "p", "br", "hr", "em", "strong", "del", "code", "pre", "blockquote",
    "ul", "ol", "li", "a", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
# No style attribute (a table's alignment): the pages' policy refuses inline styles.
_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "code": {"class"}}


def to_html(text: str) -> str:
    """The message rendered and sanitized: safe to insert into a page as HTML."""
    rendered = _PARSER.render(text)
    return _CLEANER.clean(rendered)


_CLEANER = nh3.Cleaner(
    tags=_TAGS,
    attributes=_ATTRIBUTES,
    url_schemes={"http", "https", "mailto"},
    url_relative="deny",
    link_rel="noopener noreferrer nofollow",
)
