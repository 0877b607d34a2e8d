"""Lookalike identities in the owner's views (caller.shown_to_owner): escaped with a hash
where they could pass for another, shown as they are where they are plain; the memory report
(M11) shows them so."""

from __future__ import annotations

import hashlib
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from webagents.caller import Caller, shown_to_owner
from webagents.rights import rights_of

from .memory_helpers import OWNER, memory_agent, use

LOOKALIKE = "bob@ex\u0430mple.com"  # a Cyrillic a (U+0430)


def test_display_a_lookalike_identity_is_shown_escaped_with_its_hash() -> None:
    assert shown_to_owner("caller:bob@example.com") == "caller:bob@example.com"
    assert shown_to_owner(f"caller:{LOOKALIKE}") == "caller:bob@ex\\u0430mple.com (#b7b96e18)"
    assert shown_to_owner("x\U0001f600") == "x\\U0001f600 (#c3cd6bb3)"
    assert shown_to_owner("a\\u0430") == "a\\\\u0430"  # typed out in ASCII: not the same
    assert Caller.verified(LOOKALIKE).describe() == "verified 'bob@ex\\u0430mple.com (#af7996e4)'"
    assert Caller.verified("bob@example.com").describe() == "verified 'bob@example.com'"


@given(
    st.text(max_size=12) | st.text(alphabet=" a\\", max_size=6),
    st.text(max_size=12) | st.text(alphabet=" a\\", max_size=6),
)
def test_display_two_different_identities_never_show_the_same(first: str, second: str) -> None:
    if first != second:
        assert shown_to_owner(first) != shown_to_owner(second)


@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30))
def test_display_plain_ascii_identities_show_as_they_are(identity: str) -> None:
    # A space after `:` or `#` may begin an identity inside a namespace: shown escaped.
    lookalike = "  " in identity or ": " in identity or "# " in identity
    if identity == identity.strip(" ") and not lookalike:
        assert shown_to_owner(identity) == identity.replace("\\", "\\\\")


def test_display_lookalike_spaces_at_the_ends_or_doubled_are_shown_escaped() -> None:
    """`"bob@example.com "` would print exactly like `bob@example.com`."""

    def tag(identity: str) -> str:
        return hashlib.sha256(identity.encode()).hexdigest()[:8]

    assert [shown_to_owner(i) for i in ("a b", " a", "a ", "a  b", " ")] == [
        "a b",
        f"\\u0020a (#{tag(' a')})",
        f"a\\u0020 (#{tag('a ')})",
        f"a\\u0020\\u0020b (#{tag('a  b')})",
        f"\\u0020 (#{tag(' ')})",
    ]
    # Where an identity begins inside a namespace: after `caller:`, or after an issuer's `#`.
    plain, jwt = "caller: bob@example.com", "caller:jwt:https://id.test# alice"
    assert [shown_to_owner(plain), shown_to_owner(jwt)] == [
        f"caller:\\u0020bob@example.com (#{tag(plain)})",
        f"caller:jwt:https://id.test#\\u0020alice (#{tag(jwt)})",
    ]


@given(st.text(alphabet=" ab\\u0430", max_size=8))
def test_display_what_is_shown_has_no_space_that_could_pass_unseen(
    identity: str,
) -> None:
    shown = shown_to_owner(f"caller:{identity}").split(" (#")[0]
    assert shown == shown.strip(" ")
    assert "  " not in shown
    assert not shown.startswith("caller: ")


async def test_m11_the_memory_report_shows_a_lookalike_escaped(tmp_path: Path) -> None:
    _, skill = memory_agent(tmp_path / "keeper")
    for caller in (Caller.verified("bob@example.com"), Caller.verified(LOOKALIKE)):
        await use(skill, caller, "memory_write", key="pet", content="a cat")
    report = skill.report(rights_of(OWNER)).splitlines()
    assert sorted(line for line in report if line.startswith("  caller:")) == [
        "  caller:bob@ex\\u0430mple.com (#b7b96e18): 1 note, 0 episodes",
        "  caller:bob@example.com: 1 note, 0 episodes",
    ]
