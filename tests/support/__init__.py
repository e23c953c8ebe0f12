"""Test helpers: generators, oracles, network-namespace hosts, the browser driver, requirement checks."""
