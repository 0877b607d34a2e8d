"""The JSON the portal and its agents speak (SPEC section 7), defined once: the portal answers
with these models and the agent's side (`webagents.portal_link`) reads its answers into them.
Pydantic alone: nothing of the portal's server (FastAPI, SQLAlchemy) is imported here, so that
an agent installs without the `portal` extra.

Fields that only our portal sends (a `content_sha256`, a line's own `cursor`) are optional, so
that the agent also reads the platform's answers, which lack them."""
