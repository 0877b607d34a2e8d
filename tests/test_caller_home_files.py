"""A2 (which identities name a namespace), the webagents home, and private atomic files."""

from __future__ import annotations

import fcntl
import os
import stat
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webagents import Caller
from webagents._files import (
    LinkRefused,
    atomic_write,
    ensure_private_dir,
    ensure_private_file,
    exclusive,
    open_lock,
)
from webagents.caller import RESERVED_PREFIXES, CallerKind, issuer_is_nameable, jwt_identity
from webagents.errors import ConfigError
from webagents.home import chat_history_file, sessions_dir, webagents_home
from webagents.notes.layout import namespace_folder


def test_a2_namespaces_of_each_kind_of_caller() -> None:
    assert Caller.owner().namespace == "owner"
    assert Caller.anonymous().namespace is None
    assert Caller.verified("alice@example.com", "sub-1").namespace == "caller:alice@example.com"
    assert Caller.channel("telegram", "4242").namespace == "caller:channel:telegram:4242"
    assert Caller.verified("alice@example.com", "sub-1").identities == (
        "alice@example.com",
        "sub-1",
    )


@pytest.mark.parametrize(
    "identity", ["a,b", "", "x" * 257, "line\nbreak", "tab\there", "zero\u200bwidth", "nul\x00"]
)
def test_a2_identities_that_cannot_name_a_namespace_get_none(identity: str) -> None:
    assert Caller(CallerKind.VERIFIED, identity, (identity,)).namespace is None
    assert Caller(CallerKind.CHANNEL, identity, (identity,)).namespace is None


@given(
    st.text(min_size=1, max_size=256).filter(
        lambda s: "," not in s and s.isprintable() and not s.startswith(tuple(RESERVED_PREFIXES))
    )
)
def test_a2_printable_identities_name_their_own_namespace(identity: str) -> None:
    assert Caller.verified(identity).namespace == f"caller:{unicodedata.normalize('NFC', identity)}"


def test_a2_a_verified_identity_cannot_pose_as_a_channel_sender() -> None:
    assert Caller.channel("telegram", "4242").namespace == "caller:channel:telegram:4242"
    assert Caller.verified("channel:telegram:4242").namespace is None


def test_verified_needs_an_identity() -> None:
    with pytest.raises(ValueError, match="at least one identity"):
        Caller.verified()


def test_s7_the_home_folder_follows_the_profile_and_webagents_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("WEBAGENTS_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert webagents_home() == tmp_path / ".webagents"
    assert webagents_home("work") == tmp_path / ".webagents-work"
    assert sessions_dir("work") == tmp_path / ".webagents-work" / "sessions"
    monkeypatch.setenv("WEBAGENTS_HOME", str(tmp_path / "h" / "state"))
    assert webagents_home() == tmp_path / "h" / "state"
    assert chat_history_file("w2") == tmp_path / "h" / "state-w2" / "chat-history"


@pytest.mark.parametrize("profile", ["", "../x", "Work", "a/b", "-x", "x" * 65])
def test_bad_profile_names_are_refused_with_the_rule(profile: str) -> None:
    with pytest.raises(ConfigError, match="use 1-64 characters of a-z 0-9 _ -"):
        webagents_home(profile)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o000, 0o277, 0o777])
def test_private_files_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        folder = ensure_private_dir(tmp_path / "a" / "b")
        atomic_write(folder / "note.md", b"first")
        atomic_write(folder / "note.md", b"second")
        loose = tmp_path / "loose"
        loose.touch()
        os.chmod(loose, 0o666)
        open_folder = tmp_path / "open"
        open_folder.mkdir()
        os.chmod(open_folder, 0o755)
        ensure_private_dir(open_folder)
        ensure_private_file(loose)
    finally:
        os.umask(old)
    modes = [_mode(p) for p in (tmp_path / "a", folder, folder / "note.md", loose, open_folder)]
    assert modes == [0o700, 0o700, 0o600, 0o600, 0o700]
    assert (folder / "note.md").read_bytes() == b"second"
    assert sorted(p.name for p in folder.iterdir()) == ["note.md"]  # no temporary file left


def test_a_failed_atomic_write_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "kept.json"
    atomic_write(target, b"old")

    def broken_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.json"]


def test_a_stores_lock_is_private_never_a_link_and_held_for_the_block_only(
    tmp_path: Path,
) -> None:
    """open_lock and exclusive, the lock of the notes, the conversations and the chat outbox:
    a loose lock file made 0600, a link or a second name refused (its target left as it is),
    the flock held for the block and released, the descriptor closed after."""
    folder = ensure_private_dir(tmp_path / "store")
    lock = folder / ".lock"
    lock.touch()
    os.chmod(lock, 0o644)
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    other = os.open(lock, os.O_RDWR)
    try:
        fd = open_lock(dir_fd, lock)
        assert _mode(lock) == 0o600
        with exclusive(fd) as held:
            assert held == fd
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(fd)
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released
        fcntl.flock(other, fcntl.LOCK_UN)
        target = tmp_path / "target"
        target.write_bytes(b"kept")
        os.chmod(target, 0o644)
        lock.unlink()
        lock.symlink_to(target)
        with pytest.raises(LinkRefused, match=r"\.lock is a symbolic link or not a plain file"):
            open_lock(dir_fd, lock)
        lock.unlink()
        os.link(target, lock)
        with pytest.raises(LinkRefused, match="not a plain file of its own"):
            open_lock(dir_fd, lock)
        assert (target.read_bytes(), _mode(target)) == (b"kept", 0o644)
    finally:
        os.close(other)
        os.close(dir_fd)


_issuer = st.one_of(
    st.sampled_from(["https://id.test", "https://id.test/", "https://id.test/a", "id", "j"]),
    st.text(min_size=1, max_size=60).filter(issuer_is_nameable),
)
_claim = st.one_of(
    st.sampled_from(["alice@example.com", "a", "#", "a#b", "jwt:x#y", "channel:t:1", "b/c"]),
    st.text(min_size=1, max_size=60),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_issuer, _claim), min_size=2, max_size=8))
def test_a6_distinct_issuer_and_claim_pairs_never_share_a_namespace(
    pairs: list[tuple[str, str]],
) -> None:
    """A6, M7: jwt:<issuer>#<identity> names one (issuer, identity) pair, and one folder."""
    named: dict[str, set[tuple[str, str]]] = {}
    for issuer, claim in pairs:
        namespace = Caller.verified(claim, issuer=issuer).namespace
        if namespace is None:
            continue
        # The issuer ends at the first '#': the pair can be read back from the namespace.
        scoped = namespace.removeprefix("caller:jwt:")
        assert scoped.partition("#")[::2] == (issuer, unicodedata.normalize("NFC", claim))
        named.setdefault(namespace, set()).add((issuer, unicodedata.normalize("NFC", claim)))
    assert all(len(owners) == 1 for owners in named.values())
    folders = {namespace_folder(Path("/m"), namespace) for namespace in named}
    assert len(folders) == len(named)


@settings(max_examples=400, deadline=None)
@given(issuer=_issuer, claim=_claim, other=st.one_of(_claim, st.text(max_size=300)))
def test_a6_a_jwt_identity_never_names_an_api_key_or_channel_namespace(
    issuer: str, claim: str, other: str
) -> None:
    """A6: no identity an API key may be configured with, nor a channel sender, names a JWT
    caller's namespace; an identity that tries to (a plain one with the prefix) names none."""
    jwt_namespace = Caller.verified(claim, issuer=issuer).namespace
    posing = [other, claim, jwt_identity(issuer, claim), f"jwt:{other}", f"channel:{other}"]
    for identity in posing:
        configurable = not identity.startswith(tuple(RESERVED_PREFIXES))
        namespace = Caller.verified(identity).namespace
        if not configurable:
            assert namespace is None
        elif jwt_namespace is not None:
            assert namespace != jwt_namespace
        sender = Caller.channel("telegram", identity).namespace
        assert sender is None or sender != jwt_namespace
    if jwt_namespace is not None:
        assert jwt_namespace.startswith("caller:jwt:")


def test_a6_jwt_identity_namespaces_by_example() -> None:
    assert Caller.verified("alice", issuer="https://id.test").namespace == (
        "caller:jwt:https://id.test#alice"
    )
    # The whole name obeys A2: an issuer that cannot scope, or a name over 256, names none.
    assert Caller.verified("alice", issuer="https://id.test#x").namespace is None
    assert Caller.verified("a" * 256, issuer="https://id.test").namespace is None
    assert Caller.verified("a,b", issuer="https://id.test").namespace is None
    longest = "a" * (256 - len("jwt:https://id.test#"))
    assert Caller.verified(longest, issuer="https://id.test").namespace == (
        f"caller:jwt:https://id.test#{longest}"
    )
