"""Who is calling: the `Caller` value and the namespace its verified identity names.

A `Caller` is made only by a transport after verification (the terminal chat for the owner,
the HTTP server's verifiers for everyone else), never from anything a model says. Which
namespaces a caller may read and write is decided elsewhere, from the namespace named here.

Namespaces of different kinds of caller never meet: an API key's identity names
`caller:<identity>`, a JWT issuer's caller `caller:jwt:<issuer>#<identity>` and a channel
sender `caller:channel:<type>:<id>`. The two prefixes are reserved (no API key identity may
start with them, and a plain identity that does names nothing), and an issuer holds no `#`,
so the first `#` ends it: no two (issuer, identity) pairs share a namespace.
"""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass
from enum import StrEnum

OWNER_NAMESPACE = "owner"
SHARED_NAMESPACE = "shared"
MAX_IDENTITY_LENGTH = 256
CHANNEL_PREFIX = "channel:"
JWT_PREFIX = "jwt:"
ISSUER_END = "#"
RESERVED_PREFIXES = {
    JWT_PREFIX: "callers verified by a JWT issuer",
    CHANNEL_PREFIX: "channel senders",
}
"""Identity prefixes no API key (or plain identity) may name: what each is kept for."""


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

    Printable ASCII is shown as it is (a backslash doubled); any other character, and a space
    at either end (also just after a namespace's `caller:` or an issuer's `#`) or beside
    another, as a `\\uXXXX` escape, and then a short hash of the
    whole identity is added, so a lookalike (a Cyrillic `\\u0430` for the `a` of
    `bob@example.com`, or a trailing space) cannot pass for another caller on screen or in a
    log. Different identities always show differently: the escaping can be
    read back.
    """
    last = len(identity) - 1
    # A space at either end (of the identity, or of one inside a namespace: after `caller:`
    # or an issuer's `#`), or beside another, would pass unseen: it is shown escaped.
    odd = {
        i
        for i, ch in enumerate(identity)
        if ch == " " and (i in (0, last) or identity[i - 1] in " :#" or identity[i + 1] == " ")
    }
    shown = "".join("\\u0020" if i in odd else _shown_char(ch) for i, ch in enumerate(identity))
    if not odd and all(0x20 <= ord(ch) < 0x7F for ch in identity):
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


def issuer_is_nameable(issuer: str) -> bool:
    """Whether a JWT issuer can scope its callers' identities: nameable and with no `#`."""
    return ISSUER_END not in issuer and identity_is_nameable(issuer)


def jwt_identity(issuer: str, identity: str) -> str:
    """`jwt:<issuer>#<identity>`, what a JWT caller's namespace is named by."""
    return f"{JWT_PREFIX}{issuer}{ISSUER_END}{identity}"


@dataclass(frozen=True, slots=True)
class Caller:
    """The verified party of one request or one terminal session."""

    kind: CallerKind
    identity: str | None = None
    """The first verified identity (verified), or `<type>:<sender id>` (channel)."""
    identities: tuple[str, ...] = ()
    """Every identity the verifier established, first one first."""
    issuer: str | None = None
    """The JWT issuer that vouched for the identity, which then names the namespace with it;
    None for API keys and for issuers whose tokens name plain identities on purpose."""

    @classmethod
    def owner(cls) -> Caller:
        return cls(CallerKind.OWNER)

    @classmethod
    def anonymous(cls) -> Caller:
        return cls(CallerKind.ANONYMOUS)

    @classmethod
    def verified(cls, *identities: str, issuer: str | None = None) -> Caller:
        if not identities:
            raise ValueError("a verified caller needs at least one identity")
        # NFC: the same written identity is one caller however its letters were composed.
        names = tuple(unicodedata.normalize("NFC", identity) for identity in identities)
        return cls(CallerKind.VERIFIED, names[0], names, issuer)

    @classmethod
    def channel(cls, channel_type: str, sender_id: str) -> Caller:
        identity = unicodedata.normalize("NFC", f"{channel_type}:{sender_id}")
        return cls(CallerKind.CHANNEL, identity, (identity,))

    @property
    def namespace(self) -> str | None:
        """`owner`, `caller:<identity>`, `caller:jwt:<issuer>#<identity>`,
        `caller:channel:<type>:<id>`, or None."""
        if self.kind is CallerKind.OWNER:
            return OWNER_NAMESPACE
        if self.identity is None or not identity_is_nameable(self.identity):
            return None
        if self.kind is CallerKind.VERIFIED:
            if self.issuer is not None:
                if not issuer_is_nameable(self.issuer):
                    return None
                name = jwt_identity(self.issuer, self.identity)
            elif self.identity.startswith(tuple(RESERVED_PREFIXES)):
                return None  # it would name a JWT caller's or a channel sender's namespace
            else:
                name = self.identity
            return f"caller:{name}" if identity_is_nameable(name) else None
        if self.kind is CallerKind.CHANNEL:
            return f"caller:{CHANNEL_PREFIX}{self.identity}"
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
        issuer = f" from {shown_to_owner(self.issuer)}" if self.issuer is not None else ""
        return f"{self.kind.value} '{shown_to_owner(self.identity or '')}'{issuer}"
