"""Capture: tcpdump sidecars beside a training job, remote fan-out, iteration markers, run manifest.

Deployment recipes (docs/deployment.md carries the same commands, with what each capture path loses):

Plain ssh (hosts reachable by `ssh HOST`, same Python/checkout path everywhere, as horovodrun assumes)::

    ringscope capture run --out runs/r1 -- \\
        horovodrun --gloo -np 8 -H n1:4,n2:4 python -m capture.workloads.horovod_train
    ringscope capture run --out runs/r2 --hosts n1,n2 -- torchrun --nnodes 2 ... train.py

Slurm (one agent per node beside the job step, through srun)::

    ringscope capture run --out runs/$SLURM_JOB_ID --hosts "$(scontrol show hostnames | paste -sd,)" \\
        --remote-shell 'srun --overlap -N1 -n1 -w {host}' -- srun python train.py
    # or a bare sidecar per node:
    srun --overlap --ntasks-per-node=1 ringscope capture agent --out runs/$SLURM_JOB_ID/%n &

Kubernetes (a sidecar container shares the pod's network namespace; it needs only NET_RAW and NET_ADMIN)::

    - name: ringscope
      image: <image with ringscope and tcpdump>
      command: ["ringscope", "capture", "agent", "--out", "/captures/$(POD_NAME)", "--iface", "auto"]
      securityContext: {capabilities: {add: ["NET_RAW", "NET_ADMIN"]}}
      volumeMounts: [{name: captures, mountPath: /captures}]
    # the agent stops cleanly on the pod's SIGTERM; or drive pods with --remote-shell 'kubectl exec {host} --'

Markers reach each host's folder through RINGSCOPE_MARKERS_DIR (see capture.run and capture.markers).
"""
