"""PyTorch FSDP2 (`torch.distributed.fsdp.fully_shard`) training of the same MLP as ddp_train, one marker per
iteration: sharded data parallel, each Linear its own unit, then the whole model.

Launch like any torch.distributed script (gloo on CPU, nccl on GPU), e.g. on one machine:

    torchrun --nproc-per-node 2 -m capture.workloads.fsdp_train --params 5000000 --iters 20

Per step each unit's parameters are all-gathered in the forward pass and again in the backward pass
(reshard_after_forward, full shard: ZeRO-3), or only in the forward pass with --shard-grad-op (ZeRO-2), and its
gradients reduce-scattered. Each marker carries
gradient_bytes (the model's parameter bytes S, what DDP would all-reduce), params, the model name and
pattern "fsdp" or "fsdp_shard_grad_op" with the collectives issued per step.
"""

from __future__ import annotations

import argparse

from capture.workloads import mlp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mlp.add_arguments(parser)
    parser.add_argument(
        "--backend", choices=("auto", "gloo", "nccl"), default="auto", help="auto: nccl when CUDA is available"
    )
    parser.add_argument(
        "--shard-grad-op",
        action="store_true",
        help="keep each unit's gathered parameters from the forward pass for the backward (SHARD_GRAD_OP, ZeRO-2)",
    )
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    backend, device, rank, world = mlp.start_torch(args.backend)
    torch.manual_seed(args.seed)
    model, width = mlp.build(args.params)
    model = model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    grad_bytes = mlp.gradient_bytes(model)
    units = [m for m in model if isinstance(m, torch.nn.Linear)]
    for unit in units:
        fully_shard(unit, reshard_after_forward=not args.shard_grad_op)
    fully_shard(model, reshard_after_forward=not args.shard_grad_op)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(args.seed + rank)
    inputs = torch.randn(args.batch_size, width, generator=generator).to(device)
    targets = torch.randn(args.batch_size, width, generator=generator).to(device)
    issued = {"all_gather": (1 if args.shard_grad_op else 2) * len(units), "reduce_scatter": len(units)}

    run = dict(rank=rank, backend=backend, world_size=world, params=n_params, gradient_bytes=grad_bytes)
    pattern = "fsdp_shard_grad_op" if args.shard_grad_op else "fsdp"
    mlp.train("fsdp_train", args, model, optimizer, (inputs, targets), **run, pattern=pattern, collectives=issued)
    dist.barrier()  # as in ddp_train: rank 0 hosts the store, and no rank may still talk to it when it exits
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    mlp.leave(main())
