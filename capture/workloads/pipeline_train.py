"""Pipeline-parallel training of the MLP over torch.distributed point-to-point, with a data-parallel group per
stage: the structure of Megatron-style jobs, small enough for CPUs.

W = stages × replicas ranks; rank r is stage r // replicas of replica r % replicas (the pipeline outermost, as
Megatron orders its groups). Each stage holds its share of the MLP's layers. Per optimizer step and per
micro-batch, stage s sends its activations (micro-batch × width floats) to stage s+1 of its replica and gets
their gradient back (one micro-batch after another: a burst each way per micro-batch); after the last
micro-batch each stage all-reduces its gradients, flattened, with the other replicas of that stage (its own
process group), then steps. `--schedule gpipe` sends every micro-batch forward first, then every one back (GPipe's
order: the boundaries carry all the activations, then all their gradients); `--schedule 1f1b` keeps stages - s - 1
micro-batches ahead at stage s, then alternates one forward and one backward (PipeDream-flush, as Megatron runs
it). Sends are isend, waited at the end of the step. Launch like any torch.distributed script (gloo on CPU):

    torchrun --nproc-per-node 4 -m capture.workloads.pipeline_train --stages 2 --micro-batches 4 --params 2000000

Each marker carries what a test needs as truth: stage, replica, the stage's gradient bytes (what its group
all-reduces: gradient_bytes), activation_bytes per micro-batch and direction, micro_batches, the schedule, the
pipeline peers and the data-parallel group's ranks.
"""

from __future__ import annotations

import argparse
from typing import Any

from capture import markers
from capture.workloads import mlp

SCHEDULES = ("sequential", "gpipe", "1f1b")


def stage_layers(model: Any, stages: int, stage: int) -> Any:
    """The Linear layers (with the ReLU after each but the last) of STAGE, the model's layers split in order."""
    import torch.nn as nn

    layers = list(model)
    linear = [i for i, m in enumerate(layers) if isinstance(m, nn.Linear)]
    lo, hi = len(linear) * stage // stages, len(linear) * (stage + 1) // stages  # as even as the layers allow
    if hi <= lo:
        raise ValueError(f"{stages} stages need at least as many layers; the model has {len(linear)}")
    first, last = linear[lo], linear[hi - 1]
    end = last + 2 if last + 1 < len(layers) else last + 1
    return nn.Sequential(*layers[first:end])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mlp.add_arguments(parser)
    parser.add_argument("--stages", type=int, default=2, help="pipeline stages (W must be a multiple)")
    parser.add_argument("--micro-batches", type=int, default=4, help="micro-batches per optimizer step")
    parser.add_argument(
        "--schedule",
        choices=SCHEDULES,
        default="sequential",
        help="sequential: each micro-batch forward and backward through every stage before the next; gpipe: every "
        "micro-batch forward, then every one backward; 1f1b: stage s sends stages-s-1 micro-batches ahead, then one "
        "forward, one backward",
    )
    return parser


def _average_gradients(part: Any, group: Any, replicas: int) -> None:
    """The stage's gradients all-reduced over its data-parallel GROUP as one flat tensor (one collective a step,
    as DDP's single bucket would) and averaged over its REPLICAS."""
    import torch
    import torch.distributed as dist

    flat = torch.cat([p.grad.reshape(-1) for p in part.parameters()])
    dist.all_reduce(flat, group=group)
    flat /= replicas
    at = 0
    for p in part.parameters():
        p.grad.copy_(flat[at : at + p.numel()].view_as(p))
        at += p.numel()


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist

    backend, device, rank, world = mlp.start_torch("gloo")
    if world % args.stages:
        parser.error(f"world size {world} is not a multiple of --stages {args.stages}")
    replicas = world // args.stages
    stage, replica = rank // replicas, rank % replicas
    torch.manual_seed(args.seed)
    model, width = mlp.build(args.params)
    part = stage_layers(model, args.stages, stage)
    groups = [dist.new_group(list(range(s * replicas, (s + 1) * replicas))) for s in range(args.stages)]
    mine = groups[stage]
    prev = rank - replicas if stage > 0 else None
    nxt = rank + replicas if stage + 1 < args.stages else None
    optimizer = torch.optim.SGD(part.parameters(), lr=args.lr)
    micro = max(1, args.batch_size // args.micro_batches)
    generator = torch.Generator().manual_seed(args.seed + replica)
    inputs = torch.randn(args.micro_batches, micro, width, generator=generator)
    targets = torch.randn(args.micro_batches, micro, width, generator=generator)
    grad_bytes = mlp.gradient_bytes(part)
    truth = dict(
        stage=stage,
        replica=replica,
        gradient_bytes=grad_bytes,
        activation_bytes=micro * width * 4,
        micro_batches=args.micro_batches,
        pipeline_peers=[p for p in (prev, nxt) if p is not None],
        data_parallel_group=list(range(stage * replicas, (stage + 1) * replicas)),
        world_size=world,
        backend=backend,
        pattern="pipeline",
        schedule=args.schedule,
    )

    pending: list[Any] = []  # this step's sends: isend, so that two stages sending to each other never both block

    def send(tensor: Any, peer: int) -> None:
        pending.append((dist.isend(tensor, dst=peer), tensor))

    def forward(m: int) -> tuple[Any, Any]:
        """Micro-batch m through this stage: its input (received, where a stage comes before) and output (sent on,
        or the loss on the last stage)."""
        if prev is None:
            x = inputs[m]
        else:
            x = torch.empty(micro, width)
            dist.recv(x, src=prev)
            x.requires_grad_()
        out = part(x)
        if nxt is None:
            return x, torch.nn.functional.mse_loss(out, targets[m]).div(args.micro_batches)
        send(out.detach(), nxt)
        return x, out

    def backward(x: Any, out: Any) -> None:
        """Micro-batch m back through this stage: its output's gradient received (or the loss's), its input's sent."""
        if nxt is None:
            out.backward()
        else:
            grad = torch.empty_like(out)
            dist.recv(grad, src=nxt)
            out.backward(grad)
        if prev is not None:
            assert x.grad is not None  # x required grad and the loss reached it
            send(x.grad, prev)

    for i in range(args.iters):
        with markers.iteration(i, **truth):
            optimizer.zero_grad(set_to_none=True)
            m = args.micro_batches
            # micro-batches sent on before the first gradient comes back: GPipe all, 1F1B the stages after this one
            ahead = {"gpipe": m, "1f1b": min(m, args.stages - stage - 1), "sequential": 0}[args.schedule]
            done = [forward(j) for j in range(ahead)]
            for j in range(m):
                if ahead + j < m:
                    done.append(forward(ahead + j))
                backward(*done[j])
            for work, _ in pending:
                work.wait()
            pending.clear()
            _average_gradients(part, mine, replicas)
            optimizer.step()
    if rank == 0:
        mlp.report("pipeline_train", args, 0.0, 0.0, stages=args.stages, replicas=replicas, world_size=world)
    dist.barrier()  # rank 0 hosts the store: no rank may still talk to it when it exits
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    mlp.leave(main())
