"""Reading the memory pages in tests: a table's rows as text, a form's fields."""

from __future__ import annotations

from html.parser import HTMLParser


class _Tables(HTMLParser):
    def __init__(self, wanted: str) -> None:
        super().__init__()
        self.wanted = wanted
        self.inside = 0
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and dict(attrs).get("id") == self.wanted:
            self.inside += 1
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("td", "th"):
            self.cell = []
        elif self.inside and tag == "form":
            self.skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self.inside:
            self.inside -= 1
        elif self.inside and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif self.inside and tag == "form":
            self.skip -= 1

    def handle_data(self, data: str) -> None:
        if self.cell is not None and not self.skip:
            self.cell.append(data)


def table(html: str, table_id: str) -> list[list[str]]:
    """The rows of `<table id=table_id>` as their cells' text (forms in cells left out)."""
    parser = _Tables(table_id)
    parser.feed(html)
    return parser.rows


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, dict[str, str]]] = []
        self.textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        if tag == "form":
            self.forms.append((found.get("action", ""), {}))
        elif tag == "input" and self.forms and "name" in found:
            self.forms[-1][1][found["name"]] = found.get("value", "")
        elif tag == "textarea" and self.forms:
            self.textarea = found["name"]
            self.forms[-1][1][self.textarea] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea" and self.textarea is not None:
            # A browser drops the one line break right after <textarea>, as the page expects.
            fields = self.forms[-1][1]
            fields[self.textarea] = fields[self.textarea].removeprefix("\n")
            self.textarea = None

    def handle_data(self, data: str) -> None:
        if self.textarea is not None:
            self.forms[-1][1][self.textarea] += data


def forms(html: str, action_end: str) -> list[dict[str, str]]:
    """The fields of every form whose action ends with `action_end`, as a browser sends."""
    parser = _Forms()
    parser.feed(html)
    return [fields for action, fields in parser.forms if action.endswith(action_end)]
