"""The one exception a user can cause in capture: the CLI prints its message as one line."""


class CaptureError(Exception):
    """A problem the user can fix (missing tcpdump, no permission, bad option); str() says how."""
