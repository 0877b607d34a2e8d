"""A chat message's Markdown as safe HTML for the owner's pages and the web chat.

markdown-it-py (CommonMark and tables) with raw HTML off, so markup in a message is shown
as text; its output then goes through nh3 (an allow-list sanitizer) all the same, so that no
parser bug can let a script, a style or an event handler through. Images are not rendered:
they would load from another origin, which the pages' policy refuses anyway; their Markdown
stays as text. Links open elsewhere without telling the portal's address (no referrer).
"""

from __future__ import annotations

import nh3
from markdown_it import MarkdownIt

# breaks: a chat message's line break is kept, as people wrote it.
_PARSER = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable("table")
_PARSER.disable("image")

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
    return nh3.clean(
        rendered,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
