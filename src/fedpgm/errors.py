"""The one error type for user mistakes.

A ``FedpgmError`` carries a single line that names the problem and the fix. It subclasses
``ValueError`` so library callers can catch it as such; the CLI turns it into that line on
stderr and exit code 2.
"""


class FedpgmError(ValueError):
    """A user error: bad input, a missing file, an impossible request."""
