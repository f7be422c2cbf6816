"""The one base class of errors a user can fix (bad input, missing data, incompatible files).

Stages let these propagate; ``run_stage`` prints their message and exits with status 2, so
a new error type needs no registration anywhere, only this base class.
"""


class UserError(ValueError):
    """Bad input or state the user can fix; the message names what and how."""
