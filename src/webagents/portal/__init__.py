"""The self-hosted portal (SPEC section 7): accounts, tokens, the command line's sign-in,
agents, each agent's memory store (with its owner's pages), chats, and Portal Connect.

One folder per feature (`accounts/`, `tokens/`, `cli_login/`, `agents/`, `memory/`,
`embeddings/`, `chats/`, `connect/`: schemas, repository, service, api, pages as each needs);
the tables and migrations are central in `db/`, the pages' templates in `templates/`.
Installed with the `portal` extra.
"""
