"""ringscope's analyzer: captures in, one typed result out (see analyze.api.analyze).

Its rooms, top to bottom (DESIGN.md; pyproject.toml's layers contract holds them): live follows a growing capture;
api is the facade; each_job, verdict and source find the input, analyze each job and judge; collective, wire,
whatif and dataset infer and convert; confidence draws the lines of sureness; tables builds the result's tables;
model names the result's parts; read turns capture files into scans."""

from __future__ import annotations

__version__ = "0.1.0"
