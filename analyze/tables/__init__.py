"""The result's tables below every inference: flows in words and hosts' own addresses (flows), link utilization
from series (utilization), and the ranks' own iteration markers (markers)."""
