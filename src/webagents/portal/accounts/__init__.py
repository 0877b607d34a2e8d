"""Accounts (P1): users, passwords, browser sessions, API keys, and the scope of a verified
account that every repository of the portal is made from."""
