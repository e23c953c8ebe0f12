"""The live view of a running capture: each poll reads only the records written since the last (view) into a
snapshot of hosts, edges and iterations (now) that reports.live draws, and the whole analysis rerun now and then
for the limiter its metrics carry (limiter). Above the api: the limiter runs it."""
