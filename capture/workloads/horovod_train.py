"""Horovod (horovod.torch) training of the same MLP as ddp_train, one marker per iteration.

Needs Horovod built with PyTorch and Gloo (see the README); launch with horovodrun, e.g.

    horovodrun --gloo -np 4 -H h1:1,h2:1,h3:1,h4:1 --network-interface eth0 \\
        python -m capture.workloads.horovod_train --params 5000000 --iters 20

Each marker carries gradient_bytes (what one all-reduce moves), params and the model name.

--collective reducescatter: instead of the DistributedOptimizer's all-reduce, each step reduce-scatters the
gradients flattened into one tensor (padded to a multiple of the ranks) with hvd.reducescatter, which Horovod runs
over gloo as gloo's ReduceScatterHalvingDoubling: at step k each rank sends half of what it still holds to the rank
its own number differs from in bit k. Each rank then updates its own shard of the parameters: ZeRO-2's gradient
half, with the parameters' all-gather left out so that the one collective shows alone on the wire. Its markers
carry the padded gradient bytes and collective "reducescatter".

Markers go to
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
    parser.add_argument(
        "--collective",
        choices=("allreduce", "reducescatter"),
        default="allreduce",
        help="allreduce: hvd.DistributedOptimizer (ring); reducescatter: the gradients reduce-scattered by halving",
    )
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
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    generator = torch.Generator().manual_seed(args.seed + rank)
    inputs = torch.randn(args.batch_size, width, generator=generator).to(device)
    targets = torch.randn(args.batch_size, width, generator=generator).to(device)
    if args.collective == "reducescatter":
        shard = -(-n_params // world)  # each rank's share of the flattened gradients, the last ones padded
        grad_bytes = shard * world * 4
        step = _reduce_scatter_step(hvd, model, shard, rank, args.lr)
    else:
        grad_bytes = mlp.gradient_bytes(model)
        optimizer = hvd.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=args.lr), named_parameters=model.named_parameters()
        )
        step = _all_reduce_step(optimizer, model)

    started = time.perf_counter()
    for i in range(args.iters):
        with markers.iteration(
            i,
            gradient_bytes=grad_bytes,
            params=n_params,
            model="mlp",
            backend="horovod",
            world_size=world,
            collective=args.collective,
        ):
            loss = step(inputs, targets)
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


def _all_reduce_step(optimizer, model):
    """A step whose gradients the DistributedOptimizer all-reduces (Horovod's ring over gloo)."""
    import torch

    def step(inputs, targets):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    return step


def _reduce_scatter_step(hvd, model, shard: int, rank: int, lr: float):
    """A step that reduce-scatters the gradients (flattened, padded to SHARD per rank) and applies this rank's
    averaged shard to its own slice of the parameters."""
    import torch
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    params = list(model.parameters())
    lo = rank * shard

    def step(inputs, targets):
        for p in params:
            p.grad = None
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        flat = torch.zeros(shard * hvd.size())
        grads = torch.cat([p.grad.reshape(-1) for p in params])
        flat[: len(grads)] = grads
        mine = hvd.reducescatter(flat, op=hvd.Average)
        with torch.no_grad():
            weights = parameters_to_vector(params)
            hi = min(lo + shard, len(weights))
            if hi > lo:
                weights[lo:hi] -= lr * mine[: hi - lo]
            vector_to_parameters(weights, params)
        return loss

    return step


if __name__ == "__main__":
    sys.exit(main())
