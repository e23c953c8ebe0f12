"""`python -m capture agent ...`: how `capture run` starts agents on hosts without an installed `ringscope`."""

from capture.cli_capture import capture_app

capture_app(prog_name="ringscope capture")
