"""Who is calling: the `Caller` value and the namespace its verified identity names.

A `Caller` is made only by a transport after verification (the terminal chat for the owner,
the HTTP server's verifiers for everyone else), never from anything a model says. Which
namespaces a caller may read and write is decided elsewhere, from the namespace named here.
"""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass
from enum import StrEnum

OWNER_NAMESPACE = "owner"
SHARED_NAMESPACE = "shared"
MAX_IDENTITY_LENGTH = 256


class CallerKind(StrEnum):
    OWNER = "owner"
    VERIFIED = "verified"
    CHANNEL = "channel"
    ANONYMOUS = "anonymous"


def identity_is_nameable(identity: str) -> bool:
    """Whether an identity can name a namespace (A2).

    Refused: empty, over 256 characters, a comma, or any control/format/separator-line
    character (so no newline can smuggle a second line into a prompt or a log).
    """
    if not identity or len(identity) > MAX_IDENTITY_LENGTH or "," in identity:
        return False
    return all(unicodedata.category(ch) not in {"Cc", "Cf", "Cs", "Zl", "Zp"} for ch in identity)


def shown_to_owner(identity: str) -> str:
    """An identity (or a namespace naming one) as the owner's views print it: never two alike.

    Printable ASCII is shown as it is (a backslash doubled); any other character as a
    `\\uXXXX` escape, and then a short hash of the whole identity is added, so a lookalike
    (a Cyrillic `\\u0430` for the `a` of `bob@example.com`) cannot pass for another caller on
    screen or in a log. Different identities always show differently: the escaping can be
    read back.
    """
    shown = "".join(_shown_char(ch) for ch in identity)
    if all(0x20 <= ord(ch) < 0x7F for ch in identity):
        return shown
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{shown} (#{digest})"


def _shown_char(ch: str) -> str:
    if ch == "\\":
        return "\\\\"
    code = ord(ch)
    if 0x20 <= code < 0x7F:
        return ch
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


@dataclass(frozen=True, slots=True)
class Caller:
    """The verified party of one request or one terminal session."""

    kind: CallerKind
    identity: str | None = None
    """The first verified identity (verified), or `<type>:<sender id>` (channel)."""
    identities: tuple[str, ...] = ()
    """Every identity the verifier established, first one first."""

    @classmethod
    def owner(cls) -> Caller:
        return cls(CallerKind.OWNER)

    @classmethod
    def anonymous(cls) -> Caller:
        return cls(CallerKind.ANONYMOUS)

    @classmethod
    def verified(cls, *identities: str) -> Caller:
        if not identities:
            raise ValueError("a verified caller needs at least one identity")
        # NFC: the same written identity is one caller however its letters were composed.
        names = tuple(unicodedata.normalize("NFC", identity) for identity in identities)
        return cls(CallerKind.VERIFIED, names[0], names)

    @classmethod
    def channel(cls, channel_type: str, sender_id: str) -> Caller:
        identity = unicodedata.normalize("NFC", f"{channel_type}:{sender_id}")
        return cls(CallerKind.CHANNEL, identity, (identity,))

    @property
    def namespace(self) -> str | None:
        """`owner`, `caller:<identity>`, `caller:channel:<type>:<id>`, or None."""
        if self.kind is CallerKind.OWNER:
            return OWNER_NAMESPACE
        if self.identity is None or not identity_is_nameable(self.identity):
            return None
        if self.kind is CallerKind.VERIFIED:
            if self.identity.startswith("channel:"):
                return None  # it would name a channel sender's namespace
            return f"caller:{self.identity}"
        if self.kind is CallerKind.CHANNEL:
            return f"caller:channel:{self.identity}"
        return None

    @property
    def is_owner(self) -> bool:
        return self.kind is CallerKind.OWNER

    def describe(self) -> str:
        """A short human label for logs and the chat (never used for decisions)."""
        if self.kind is CallerKind.OWNER:
            return "owner"
        if self.kind is CallerKind.ANONYMOUS:
            return "anonymous"
        return f"{self.kind.value} '{shown_to_owner(self.identity or '')}'"
