"""Sign-in attempts, limited per account and address pair and per address, counted in the
database so that every portal process shares the count. Over a limit every attempt is
answered 429 without looking at the password, so guessing stops even for the right one.

The account's limit counts the failures from one address only: a stranger who types five
wrong passwords for someone's account locks out that stranger's address, never the owner
signing in from their own. Guessing from many addresses is bounded by each address's limit.
"""

from __future__ import annotations

from datetime import datetime

from ..errors import TooManyRequests
from ..settings import PortalSettings
from .repository import PreAuth


def check_allowed(
    directory: PreAuth, settings: PortalSettings, username: str, address: str, now: datetime
) -> None:
    since = now - settings.sign_in_window
    minutes = int(settings.sign_in_window.total_seconds() // 60)
    if directory.failures_since(since, username=username, address=address) >= (
        settings.sign_in_failures_per_account
    ):
        raise TooManyRequests(
            f"too many failed sign-ins for {username!r} from your address: wait {minutes} "
            "minutes and try again"
        )
    if directory.failures_since(since, address=address) >= settings.sign_in_failures_per_address:
        raise TooManyRequests(
            f"too many failed sign-ins from your address: wait {minutes} minutes and try again"
        )


def record_failure(
    directory: PreAuth, settings: PortalSettings, username: str, address: str, now: datetime
) -> None:
    directory.forget_failures(before=now - settings.sign_in_window)
    directory.add_failure(username[:64], address[:64], now)


def record_success(directory: PreAuth, username: str, address: str) -> None:
    """The right password from this address clears this address's failures for the account
    alone: another address's guesses at it stay counted."""
    directory.forget_failures_of(username[:64], address[:64])
