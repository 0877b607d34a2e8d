"""The agent's side of the portal (SPEC P3-P12): the HTTP client of its API (`client`), the
memory sync (`memory_sync/`), the chats recorded through a durable outbox (`chats`,
`chat_outbox`) and Portal Connect's WebSocket (`connect`). The portal itself, the server, is
`webagents.portal`; this package never imports it, so that an agent installs without it."""
