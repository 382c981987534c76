"""The one error the model layer raises.

Contract: every failure the user can act on (missing part, bad checksum, offline hub, unknown
device) surfaces as :class:`ModelError` whose ``str()`` is a single user-facing line; callers
print it and exit 2. Nothing else in the package needs to know about transformers exceptions.
"""

from __future__ import annotations


class ModelError(Exception):
    """A model could not be found, assembled, converted or placed. ``str()`` is one line."""
