"""Tokens (P2): the portal's signing keys, their rotation, and access tokens (asymmetric
JWTs with `kid`) that anyone can verify against `/.well-known/jwks.json`."""
