"""Agents (P4): what `webagents publish` creates and updates, owned by one account."""
