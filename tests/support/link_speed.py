"""A copy of a run as a capture agent without a link speed would have written it: meta.json without
link_speed_bps (the analyzer then assumes one, analyze.tables.build._link_speed). Tests read the same capture with
and without it to check that nothing judged from the packets alone moves with the line rate."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def without_link_speed(run: Path, dest: Path) -> Path:
    """RUN copied to DEST with every host's meta.json stripped of its link speed; DEST."""
    shutil.copytree(run, dest)
    for meta in dest.glob("*/meta.json"):
        doc = json.loads(meta.read_text())
        doc.pop("link_speed_bps", None)
        meta.write_text(json.dumps(doc))
    return dest
