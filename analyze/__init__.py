"""ringscope's analyzer: captures in, one typed result out (see analyze.api.analyze).

Its rooms, top to bottom (DESIGN.md; pyproject.toml's layers contract holds them): api, source and result_whatif
build a result; collective, wire, whatif, live and dataset infer and convert; confidence draws the lines of
sureness; tables and result name the result's parts; read turns capture files into scans."""

from __future__ import annotations

__version__ = "0.1.0"
