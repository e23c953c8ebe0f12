"""Environment requirements for tests: skip on a laptop, fail loudly on CI (CI=true) where they must hold."""

from __future__ import annotations

import os
import shutil

import pytest


def require(condition: bool, reason: str) -> None:
    """pytest.skip(reason) when CONDITION is false, or pytest.fail under CI=true."""
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"required on CI: {reason}", pytrace=False)
    pytest.skip(reason)


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
