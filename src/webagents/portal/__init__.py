"""The self-hosted portal (SPEC section 7): accounts, tokens, the command line's sign-in,
agents, each agent's memory store (with its owner's pages), chats, and Portal Connect.

One folder per feature (`accounts/`, `tokens/`, `cli_login/`, `agents/`, `memory/`,
`embeddings/`, `chats/`, `connect/`: schemas, repository, service, api, pages as each needs);
the tables and migrations are central in `db/`, the pages' templates in `templates/`.
Installed with the `portal` extra.

The layers, lowest first. Each imports only from the layers below it, and two features of
one layer not from each other (tests/test_import_graph.py checks it, naming an import that
goes up):

1. the base: `errors`, `scope` (the scopes every repository is made from), `storable`,
   `json_body`, `body_limit`, `static`, `settings` (the memory quotas' included), `db/`
   (tables, dialect, the engine and an endpoint's session, `Db`); its modules may use each
   other, without a circle;
2. `embeddings/`: the models that turn notes into vectors;
3. `tokens/`: signing keys, access tokens, agent keys, the digest of the secrets handed out;
4. `web`: the pages' templates, cookies and CSRF (its form secrets come from signing keys);
5. `accounts/`: users, passwords, sessions, and who a request is (`auth.py`); `refusal`:
   a full database gate's 503, answered in front of the app (its outermost layer);
6. `agents/` (the account's home and each agent's page included) and `cli_login/`;
7. `chats/` and `memory/`, each on agents;
8. `connect/`, on agents and chats;
9. what puts them together: `app` (mounts every router), `background` (the embedding worker
   and the retention sweeper), `admin` (the command line's administrator).
"""
