"""Errors a user can cause, each with the exit code the CLI turns it into.

The library raises these; only the CLI prints them (one line, no traceback). Messages name the
file, column or flag at fault and never contain a data value: error text ends up in logs that
are less protected than the data.
"""

from __future__ import annotations


class DpsynthError(Exception):
    """Base class: a problem the user can fix. `exit_code` is what the CLI exits with."""

    exit_code = 1


class UsageError(DpsynthError):
    """Bad flags or arguments (exit 2)."""

    exit_code = 2


class DataError(DpsynthError):
    """Unreadable, malformed or unusable input data (exit 1)."""

    exit_code = 1


class PrivacyRefusal(DpsynthError):
    """A request refused because it would break the privacy promise (exit 3)."""

    exit_code = 3
