"""`ringscope whatif [SOURCE]` as a library call: the run SOURCE names (a run directory analyzed now, or a result
JSON read back) and the what-if over its measurements, from option strings as the command line takes them. The
command line only prints what this returns.

Why at the top layer: a run directory is analyzed (analyze.api) before the what-if reads its Result. User errors
are ValueError with one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from analyze.findings import WhatIf
from analyze.result import Result
from analyze.saved import read_result
from analyze.whatif.inputs import inputs_from_result
from analyze.whatif.request import WhatIfOptions, what_if_options

__all__ = ["load_result", "run_whatif"]


def load_result(path: Path) -> Result:
    """The analyzer's result: a run directory analyzed now (with its tables), or a result JSON read back
    (without them)."""
    if path.is_dir():
        from analyze.api import analyze  # pandas and the readers load only for a run directory
        from analyze.read.formats import FileError

        try:
            return analyze([path])
        except FileError as exc:
            raise ValueError(str(exc)) from None
    return read_result(path)


def run_whatif(source: Optional[Path], options: WhatIfOptions = WhatIfOptions()) -> WhatIf:
    """The what-if `ringscope whatif` prints: the run's measurements (SOURCE, when given) and the OPTIONS, parsed
    from their strings by analyze.whatif.request.what_if_options."""
    return what_if_options(inputs_from_result(load_result(source)) if source is not None else None, options)
