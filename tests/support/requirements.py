"""Environment requirements for tests: skip on a laptop, fail loudly on CI (CI=true) where they must hold."""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
from types import ModuleType

import pytest


def require(condition: bool, reason: str) -> None:
    """pytest.skip(reason) when CONDITION is false, or pytest.fail under CI=true. Also at a module's top level,
    where the skip covers the whole module."""
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"required on CI: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_module(name: str) -> ModuleType:
    """The module NAME, imported: pytest.importorskip's use, but through require(), so that under CI=true a test
    extra that is not installed fails instead of hiding the tests that need it."""
    require(importlib.util.find_spec(name) is not None, f"needs {name} (pip install -e '.[test]')")
    return importlib.import_module(name)


def is_root() -> bool:
    return os.geteuid() == 0


def have(program: str) -> bool:
    return shutil.which(program) is not None


def require_capture() -> None:
    """Root (or CAP_NET_RAW) and tcpdump, for tests that really capture."""
    require(is_root(), "needs root to capture packets")
    require(have("tcpdump"), "needs tcpdump (apt-get install tcpdump)")


def require_netns() -> None:
    """Root, iproute2 and tc, for tests that build network namespaces."""
    require_capture()
    require(have("ip") and have("tc"), "needs iproute2 (ip, tc)")
