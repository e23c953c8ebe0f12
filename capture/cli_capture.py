"""`ringscope capture ...`: the command-line face of the capture agent and of `capture run`.

Imported by cli.py at start-up, so it imports only typer here; the work is imported inside commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

capture_app = typer.Typer(
    help="Capture traffic with tcpdump sidecars beside a training job.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(message: str | Exception, code: int = 2) -> typer.Exit:
    """Print one clear error line on stderr and return the Exit to raise: the one error printer of both faces
    (cli.py imports it), so every command's errors read `ringscope: error: ...` and exit 2."""
    typer.echo(f"ringscope: error: {message}", err=True)
    return typer.Exit(code=code)


def _peers(text: Optional[str]) -> List[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


@capture_app.command()
def agent(
    out: Path = typer.Option(..., "--out", help="Folder for meta.json and the pcaps (created)."),
    iface: str = typer.Option(
        "auto",
        "--iface",
        help="auto (the training's interface settings, else the route to MASTER_ADDR or to the other --peers; "
        "lo only when every peer is this host; else the only non-loopback interface up), NAME or any; or an "
        "RDMA device (mlx5_0, mlx5_0:2) for RoCE/InfiniBand through libpcap's RDMA sniffer.",
    ),
    snaplen: Optional[int] = typer.Option(
        None,
        "--snaplen",
        help="Bytes kept per packet, fixed (default: each packet cut at the end of its TCP/UDP header in the "
        "kernel, no payload byte kept).",
    ),
    payload_bytes: int = typer.Option(
        0, "--payload-bytes", help="Payload bytes kept after each packet's headers, on purpose (default 0)."
    ),
    bpf: Optional[str] = typer.Option(None, "--filter", help="BPF filter, e.g. 'tcp and not port 22'."),
    rotate_size: Optional[str] = typer.Option(
        None, "--rotate-size", help="Start a new file after SIZE (e.g. 1G; whole MB)."
    ),
    keep: Optional[int] = typer.Option(None, "--keep", help="With --rotate-size: keep only the last N files (ring)."),
    rotate_seconds: Optional[int] = typer.Option(None, "--rotate-seconds", help="Start a new file every S seconds."),
    duration: Optional[float] = typer.Option(None, "--duration", help="Stop after S seconds."),
    until_pid: Optional[int] = typer.Option(
        None, "--until-pid", help="Stop when process PID exits (e.g. the training job)."
    ),
    link_speed: Optional[str] = typer.Option(
        None, "--link-speed", help="Link speed to record, e.g. 25Gbit (virtual interfaces report none)."
    ),
    peers: Optional[str] = typer.Option(
        None, "--peers", help="Other hosts of the job, to find the interface that reaches them."
    ),
    host: Optional[str] = typer.Option(None, "--host", help="Host name to record (default: this machine's hostname)."),
    iface_hint: Optional[List[str]] = typer.Option(
        None,
        "--iface-hint",
        help="The interface the training uses, NCCL_SOCKET_IFNAME style (prefixes, =exact, ^exclude); "
        "read from NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, HOROVOD_GLOO_IFACE too.",
    ),
    address_hint: Optional[List[str]] = typer.Option(
        None, "--address-hint", help="An address the training connects to (as MASTER_ADDR, which is read too)."
    ),
    markers_template: Optional[str] = typer.Option(
        None, "--markers-template", hidden=True, help="capture run's markers folder template ({host})."
    ),
    stop_on_stdin_eof: bool = typer.Option(
        False, "--stop-on-stdin-eof", hidden=True, help="Stop when stdin closes (capture run)."
    ),
    ready_timeout: float = typer.Option(
        15.0, "--ready-timeout", help="Seconds to wait for tcpdump to start capturing."
    ),
) -> None:
    """Run tcpdump headers-only on one server until stopped; prints a 'ready' line once capturing.

    Stops on SIGINT/SIGTERM, --duration or --until-pid; tcpdump never outlives the agent.
    """
    from capture.agent import AgentOptions, run_agent
    from capture.errors import CaptureError
    from capture.hints import Hints, parse_arg
    from capture.units import parse_link_speed, parse_size

    try:
        options = AgentOptions(
            out=out,
            iface=iface,
            snaplen=snaplen,
            payload_bytes=payload_bytes,
            bpf=bpf,
            rotate_bytes=int(parse_size(rotate_size)) if rotate_size else None,
            keep=keep,
            rotate_seconds=rotate_seconds,
            duration_s=duration,
            until_pid=until_pid,
            link_speed_bps=round(parse_link_speed(link_speed)) if link_speed else None,
            peers=_peers(peers),
            hints=Hints([parse_arg(t) for t in iface_hint or []], [parse_arg(t) for t in address_hint or []]),
            host=host,
            stop_on_stdin_eof=stop_on_stdin_eof,
            markers_template=markers_template,
            ready_timeout_s=ready_timeout,
        )
        raise typer.Exit(code=run_agent(options))
    except (CaptureError, ValueError) as error:
        raise fail(error) from None


@capture_app.command(context_settings={"allow_interspersed_args": False})
def run(
    command: List[str] = typer.Argument(..., metavar="-- TRAINING COMMAND...", help="The training command (run here)."),
    out: Path = typer.Option(..., "--out", help="Run folder: run.json and one folder per host (created)."),
    hosts: Optional[str] = typer.Option(
        None, "--hosts", help="h1,h2,... in launch order (default: read from the training command)."
    ),
    hostfile: Optional[Path] = typer.Option(
        None, "--hostfile", help="File with one host per line ('h1', 'h1 slots=4' or 'h1:4')."
    ),
    remote_shell: Optional[str] = typer.Option(
        None,
        "--remote-shell",
        help="How to run a command on a host: 'ssh {host}' (default), 'srun -w {host}', "
        "'ip netns exec {host}', 'local'.",
    ),
    agent_command: Optional[str] = typer.Option(
        None,
        "--agent-command",
        help="How to start an agent on a host (default: this Python with this checkout), "
        "e.g. 'ringscope capture agent'.",
    ),
    iface: Optional[str] = typer.Option(None, "--iface", help="Passed to every agent."),
    snaplen: Optional[int] = typer.Option(None, "--snaplen", help="Passed to every agent."),
    payload_bytes: Optional[int] = typer.Option(None, "--payload-bytes", help="Passed to every agent."),
    bpf: Optional[str] = typer.Option(None, "--filter", help="Passed to every agent."),
    link_speed: Optional[str] = typer.Option(None, "--link-speed", help="Passed to every agent."),
    rotate_size: Optional[str] = typer.Option(None, "--rotate-size", help="Passed to every agent."),
    keep: Optional[int] = typer.Option(None, "--keep", help="Passed to every agent."),
    rotate_seconds: Optional[int] = typer.Option(None, "--rotate-seconds", help="Passed to every agent."),
    ready_timeout: float = typer.Option(60.0, "--ready-timeout", help="Seconds to wait for every agent to capture."),
    stage: str = typer.Option(
        "/tmp", "--stage", help="Absolute folder on every host where agents write until gathered (removed after)."
    ),
    live: bool = typer.Option(
        False,
        "--live",
        help="Show the capture every second while training runs (ringscope capture top): needs the hosts' "
        "staging folders on this machine (local hosts, network namespaces, a shared --stage).",
    ),
    metrics: Optional[str] = typer.Option(
        None,
        "--metrics",
        metavar="ADDRESS:PORT",
        help="With --live: also serve the live view at http://ADDRESS:PORT/metrics for Prometheus "
        "(capture top --metrics).",
    ),
) -> None:
    """Start an agent on every host, run the training command, gather RUN/<host>/ and write run.json.

    Exits with the training command's exit code; 2 when a host failed to capture (no packet with the other
    hosts, packets lost to a full disk, an agent error); 128+N when interrupted by signal N (Ctrl-C, SIGTERM,
    SIGHUP), which is passed to the training's whole process group, and the captures so far are kept.
    """
    import os
    import shlex
    import sys

    from capture import hints
    from capture import hosts as hostlists
    from capture.errors import CaptureError
    from capture.remote import resolve_template
    from capture.run import RunOptions, default_agent_command, run_capture
    from capture.units import parse_listen_address, parse_link_speed, parse_size

    passthrough = {
        "--iface": iface,
        "--snaplen": snaplen,
        "--payload-bytes": payload_bytes,
        "--filter": bpf,
        "--link-speed": link_speed,
        "--rotate-size": rotate_size,
        "--keep": keep,
        "--rotate-seconds": rotate_seconds,
    }
    agent_args = [word for name, value in passthrough.items() if value is not None for word in (name, str(value))]
    if iface is None:  # the job's own settings travel to hosts whose environment (ssh) does not have them
        agent_args += hints.from_environment(dict(os.environ)).add(hints.from_command(list(command))).as_args()
    try:
        if metrics and not live:
            raise ValueError("--metrics serves the live view: give --live too")
        if metrics:
            parse_listen_address(metrics)  # a bad address fails here, before any agent or training starts
        if link_speed:
            parse_link_speed(link_speed)  # a bad value fails here, before any agent or training starts
        if rotate_size:
            parse_size(rotate_size)
        if hosts:
            host_list = hostlists.parse_host_list(hosts)
        elif hostfile:
            host_list = hostlists.read_hostfile(hostfile)
        else:
            host_list = hostlists.hosts_from_command(command)
        host_list = hostlists.check_names(host_list)
        options = RunOptions(
            out=out,
            hosts=host_list,
            template=resolve_template(remote_shell, host_list),
            command=list(command),
            agent_args=agent_args,
            ready_timeout_s=ready_timeout,
            stage=stage,
            agent_command=shlex.split(agent_command) if agent_command else default_agent_command(),
            live_command=[sys.executable, "-m", "cli", "capture", "top", *(["--metrics", metrics] if metrics else [])]
            if live
            else None,
        )
        raise typer.Exit(code=run_capture(options))
    except (CaptureError, ValueError) as error:
        raise fail(error) from None
