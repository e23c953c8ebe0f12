"""Horovod (horovod.torch) training of the same MLP as ddp_train, one marker per iteration.

Needs Horovod built with PyTorch and Gloo (see the README); launch with horovodrun, e.g.

    horovodrun --gloo -np 4 -H h1:1,h2:1,h3:1,h4:1 --network-interface eth0 \\
        python -m capture.workloads.horovod_train --params 5000000 --iters 20

Each marker carries gradient_bytes (what one all-reduce moves), params and the model name. Markers go to
the folder of the host horovodrun placed the rank on (HOROVOD_HOSTNAME, the name given to -H, which is also
the name `ringscope capture run` reads from -H), not to the machine's own hostname, which may differ (FQDN,
or network namespaces sharing one hostname).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from capture import markers
from capture.workloads import mlp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mlp.add_arguments(parser)
    args = parser.parse_args(argv)

    import torch

    try:
        import horovod.torch as hvd
    except ImportError as error:
        print(
            f"horovod_train: error: horovod.torch is not importable ({error}); install Horovod with "
            "HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1",
            file=sys.stderr,
        )
        return 2

    if os.environ.get("HOROVOD_HOSTNAME"):  # before the first marker: capture.markers reads it once
        os.environ.setdefault(markers.ENV_HOST, os.environ["HOROVOD_HOSTNAME"])
    hvd.init()
    rank, world = hvd.rank(), hvd.size()
    device = torch.device("cuda", hvd.local_rank()) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.manual_seed(args.seed)
    model, width = mlp.build(args.params)
    model = model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    grad_bytes = mlp.gradient_bytes(model)
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=args.lr), named_parameters=model.named_parameters()
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    generator = torch.Generator().manual_seed(args.seed + rank)
    inputs = torch.randn(args.batch_size, width, generator=generator).to(device)
    targets = torch.randn(args.batch_size, width, generator=generator).to(device)

    started = time.perf_counter()
    for i in range(args.iters):
        with markers.iteration(
            i, gradient_bytes=grad_bytes, params=n_params, model="mlp", backend="horovod", world_size=world
        ):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
    elapsed = time.perf_counter() - started
    if rank == 0:
        print(
            json.dumps(
                {
                    "workload": "horovod_train",
                    "world_size": world,
                    "params": n_params,
                    "gradient_bytes": grad_bytes,
                    "iters": args.iters,
                    "seconds": round(elapsed, 3),
                    "loss": loss.item(),
                }
            ),
            flush=True,
        )
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
