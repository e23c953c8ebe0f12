"""Every fixture's outputs (JSON, summary, CSV, Parquet) are byte-identical to the recorded digests
(tests/support/golden.py): a refactor that moves rooms, types or names must not change a single byte. An intended
change of output is re-recorded with `python tests/support/golden.py --record`, and the diff of tests/golden.json
shows which outputs it touched."""

from __future__ import annotations

import json

import pytest

from golden import CASES, DIGESTS, outputs


@pytest.mark.parametrize("name, paths, options", CASES, ids=[c[0] for c in CASES])
def test_outputs_are_byte_identical(name, paths, options, tmp_path):
    want = json.loads(DIGESTS.read_text())[name]
    assert outputs(paths, options, tmp_path) == want
