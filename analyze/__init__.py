"""ringscope's analyzer: captures in, one typed result out (see analyze.api.analyze)."""

from __future__ import annotations

__version__ = "0.1.0"
