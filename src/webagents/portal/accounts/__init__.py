"""Accounts (P1): users, passwords, browser sessions, API keys, and who a request is
(`auth.py`, the only code that makes the scopes of ../scope.py from a verified credential)."""
