"""Signing keys as data: make an RSA key, its public JWK, and which keys are in use.

Which key signs and which are published is worked out from the keys' activation times
alone, so that every portal process, reading the same table, agrees without talking."""

from __future__ import annotations

import base64
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from jwt.algorithms import RSAAlgorithm

from ..db.tables import SigningKey

ALGORITHM = "RS256"
# Loaded private keys kept (by kid) for signing: a few, as only the signing key and the one
# rotated in are used at a time.
LOADED_KEYS_KEPT = 8


def new_signing_key(now: datetime, activates_at: datetime) -> SigningKey:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk: dict[str, Any] = RSAAlgorithm.to_jwk(private.public_key(), as_dict=True)
    # The kid is the RFC 7638 thumbprint of the public key: stable and unique to it.
    canonical = f'{{"e":"{jwk["e"]}","kty":"RSA","n":"{jwk["n"]}"}}'.encode()
    kid = base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).decode().rstrip("=")
    public = {
        "kty": "RSA",
        "n": jwk["n"],
        "e": jwk["e"],
        "kid": kid,
        "alg": ALGORITHM,
        "use": "sig",
    }
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return SigningKey(
        kid=kid,
        algorithm=ALGORITHM,
        private_pem=pem,
        public_jwk=public,
        created_at=now,
        activates_at=activates_at,
    )


def signer(keys: Sequence[SigningKey], now: datetime) -> SigningKey | None:
    """The newest key whose time to sign has come."""
    active = [key for key in _ordered(keys) if key.activates_at <= now]
    return active[-1] if active else None


def published(
    keys: Sequence[SigningKey], now: datetime, token_lifetime: timedelta
) -> list[SigningKey]:
    """The keys a verifier needs: every key not yet replaced (a new one included, before it
    signs), and a replaced one until the last token it could have signed has expired."""
    ordered = _ordered(keys)
    successors: list[SigningKey | None] = [*ordered[1:], None]
    return [
        key
        for key, successor in zip(ordered, successors[: len(ordered)], strict=True)
        if successor is None or successor.activates_at + token_lifetime > now
    ]


def _ordered(keys: Sequence[SigningKey]) -> list[SigningKey]:
    return sorted(keys, key=lambda key: (key.activates_at, key.kid))


class _LoadedKeys:
    """Private keys loaded once per kid, for every thread of the process: loading the PEM
    costs about 28 ms, signing with a loaded key about 0.25 ms. Keyed by kid (the thumbprint
    of the public key, so a kid names one key pair): which key signs is still decided by the
    table, each time; a rotated-in key is loaded on its first use, the oldest dropped."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._keys: OrderedDict[str, RSAPrivateKey] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, key: SigningKey) -> RSAPrivateKey:
        with self._lock:
            loaded = self._keys.get(key.kid)
            if loaded is not None:
                self._keys.move_to_end(key.kid)
                return loaded
        # Loaded outside the lock (slow); two threads may both load a new key, harmlessly.
        fresh = serialization.load_pem_private_key(key.private_pem.encode(), password=None)
        if not isinstance(fresh, RSAPrivateKey):
            raise ValueError(f"the signing key {key.kid} is not an RSA key")
        with self._lock:
            self._keys[key.kid] = fresh
            self._keys.move_to_end(key.kid)
            while len(self._keys) > self._kept:
                self._keys.popitem(last=False)
        return fresh

    def kids(self) -> list[str]:
        with self._lock:
            return list(self._keys)


LOADED = _LoadedKeys(LOADED_KEYS_KEPT)


def private_key(key: SigningKey) -> RSAPrivateKey:
    """The key's private half, loaded (once per process and kid) for `jwt.encode`."""
    return LOADED.of(key)
