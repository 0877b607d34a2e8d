"""Checks of a rendered page in Chromium, for the tests of the portal's look (issue 25):
axe-core's accessibility rules (vendored in data/axe.min.js, MPL-2.0, licence beside it),
the page's width on a phone, and a screenshot kept as an artefact of the test run.

axe is evaluated from the file rather than added as a <script> tag: the pages' policy
refuses inline scripts, and turning the policy off for the test (bypass_csp) would hide the
very refusals these tests look for. Nothing is fetched from the network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

AXE_SOURCE = Path(__file__).with_name("data").joinpath("axe.min.js")
# The screenshots of a run: gitignored, named by page, width and colour scheme.
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
WIDTHS = (375, 1280)
SCHEMES = ("light", "dark")
SERIOUS = ("serious", "critical")

# axe's rules that read the page's colours: all that a colour scheme can change, since the
# stylesheets' dark scheme sets colours only (portal.css, Pico's variables).
COLOUR_RULES = ("color-contrast", "link-in-text-block")

_AXE_RUN = """async ([serious, rules]) => {
  const options = { resultTypes: ["violations"] };
  if (rules !== null) options.runOnly = { type: "rule", values: rules };
  const result = await axe.run(document, options);
  return result.violations
    .filter((v) => serious.includes(v.impact))
    .map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
}"""


def serious_violations(page: Any, rules: tuple[str, ...] | None = None) -> list[str]:
    """axe-core's serious and critical violations on the page as it is now: of every rule, or
    of `rules` alone."""
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        page.evaluate(AXE_SOURCE.read_text("utf-8"))
    chosen = list(rules) if rules is not None else None
    found: list[str] = page.evaluate(_AXE_RUN, [list(SERIOUS), chosen])
    return found


def overflows(page: Any) -> bool:
    """Whether the page is wider than the window (a sideways scroll on a phone)."""
    wider: bool = page.evaluate("() => document.documentElement.scrollWidth > window.innerWidth")
    return wider


def screenshot(page: Any, name: str, width: int, scheme: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}-{width}-{scheme}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


class Watch:
    """What a page asked of other origins, and the policy refusals its console reported."""

    def __init__(self, page: Any, origin: str) -> None:
        self.elsewhere: list[str] = []
        self.refused: list[str] = []
        page.on("request", self._request(origin))
        page.on("console", self._console)

    def _request(self, origin: str) -> Any:
        def seen(request: Any) -> None:
            url: str = request.url
            if not url.startswith((origin + "/", "data:")):
                self.elsewhere.append(url)

        return seen

    def _console(self, message: Any) -> None:
        text: str = message.text
        if "Content Security Policy" in text or "Refused to" in text:
            self.refused.append(text)
