"""Tokens (P2): the portal's signing keys, their rotation, and access tokens (asymmetric
JWTs with `kid`) that anyone can verify against `/.well-known/jwks.json`; the secrets the
portal hands out and how they are kept (`credentials.py`), and agent keys (`agent_keys.py`).
Below accounts: verifying a request's credential (accounts/auth.py) uses them."""
