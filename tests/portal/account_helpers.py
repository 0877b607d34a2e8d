"""Portal users and their API keys made in the test's own process, for tests about something
else: what `webagents portal adduser` and `webagents portal apikey` do (the same functions of
webagents.portal.admin), without their two processes, about 2.5 s of CPU a user.
tests/portal/test_portal_cli.py and test_portal_cli_accounts.py run the commands themselves."""

from __future__ import annotations

from webagents.portal.admin import add_user, new_api_key, open_database
from webagents.portal.settings import PortalSettings

from .conftest import PASSWORD


def new_user_key(database: str, username: str, password: str = PASSWORD) -> str:
    """A new user of the portal on `database` and an API key of theirs (rok_..., named as
    `portal apikey` names one by default)."""
    engine = open_database(PortalSettings(database_url=database))
    try:
        add_user(engine, username, password)
        return new_api_key(engine, username, "command line").key
    finally:
        engine.dispose()
