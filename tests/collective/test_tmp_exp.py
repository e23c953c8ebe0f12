from tests.support.netns import netns_cluster  # noqa: F401
from tests.support.training_capture import Job, live_capture
import shutil

RUNS = {"s4": dict(slow_host=3, slow_host_rate="200mbit"), "r1": dict(slow_rank=1, extra_compute_ms=150)}


def test_exp(tmp_path, netns_cluster):  # noqa: F811
    for name, kw in RUNS.items():
        live_capture(tmp_path / name, netns_cluster, Job(hosts=4, iters=14, params=2_500_000, batch=64, **kw))
        shutil.copytree(tmp_path / name / "cap", f"/tmp/exp/{name}", dirs_exist_ok=True)
