"""PyTorch DDP training of an MLP (gloo on CPU, nccl on GPU), one marker per iteration.

Launch like any torch.distributed script (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK in
the environment), e.g. on one machine:

    torchrun --nproc-per-node 2 -m capture.workloads.ddp_train --params 5000000 --iters 20

Each marker carries gradient_bytes (what one all-reduce moves), params, the model name and the micro-batches
per optimizer step (--accumulate: gradients all-reduced once per step, after the last). --slow-rank R
--extra-compute-ms X makes rank R a straggler: X ms more arithmetic before every forward pass, recorded in its
markers as extra_compute_ns. --bucket-log DIR records when each gradient bucket is handed to the process group
(capture.workloads.bucket_log).
"""

from __future__ import annotations

import argparse
import os

from capture.workloads import mlp
from capture.workloads.bucket_log import BucketLog


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mlp.add_arguments(parser)
    parser.add_argument(
        "--backend",
        choices=("auto", "gloo", "nccl"),
        default="auto",
        help="auto: nccl when CUDA is available, else gloo",
    )
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP gradient bucket size")
    parser.add_argument(
        "--accumulate", type=int, default=1, help="micro-batches per optimizer step (gradient accumulation)"
    )
    parser.add_argument("--slow-rank", type=int, default=-1, help="this rank computes --extra-compute-ms more per step")
    parser.add_argument(
        "--extra-compute-ms", type=float, default=0.0, help="arithmetic before each forward pass (a straggler)"
    )
    parser.add_argument("--profile-dir", help="record each rank's torch.profiler trace into this folder")
    parser.add_argument(
        "--bucket-log", help="record when each gradient bucket is handed to the process group into this folder"
    )
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    backend, device, rank, world = mlp.start_torch(args.backend)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.manual_seed(args.seed)
    model, width = mlp.build(args.params)
    model = model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    grad_bytes = mlp.gradient_bytes(model)
    ddp = DistributedDataParallel(
        model, device_ids=[local_rank] if device.type == "cuda" else None, bucket_cap_mb=args.bucket_cap_mb
    )
    buckets = BucketLog(ddp, world) if args.bucket_log else None
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(args.seed + rank)
    inputs = torch.randn(args.batch_size, width, generator=generator).to(device)
    targets = torch.randn(args.batch_size, width, generator=generator).to(device)

    run = dict(rank=rank, backend=backend, world_size=world, params=n_params, gradient_bytes=grad_bytes)
    mlp.train(
        "ddp_train",
        args,
        ddp,
        optimizer,
        (inputs, targets),
        **run,
        micro_batches=args.accumulate,
        accumulate=args.accumulate,
        quiet=ddp.no_sync,
        extra_compute_s=args.extra_compute_ms / 1e3 if rank == args.slow_rank else 0.0,
        profile_dir=args.profile_dir,
    )
    if buckets is not None:
        buckets.write(args.bucket_log, rank)
    # every rank reaches the end before any tears down: rank 0 hosts the rendezvous store, and a rank still
    # talking to it when rank 0 exits aborts ("terminate called without an active exception", exit 250)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    mlp.leave(main())
