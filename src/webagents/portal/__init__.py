"""The self-hosted portal (SPEC section 7): accounts, and later tokens, agents, memory, chats.

One folder per feature (`accounts/`: schemas, repository, service, api, pages); the tables
and migrations are central in `db/`. Installed with the `portal` extra.
"""
