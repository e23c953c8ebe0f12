"""The result's tables below every inference, and where they are built (build): flows in words and hosts' own
addresses (flows, hosts), link utilization from series (utilization), the ranks' own iteration markers (markers),
what each capture missed (capture_holes), the hosts' clock offsets (clocks), and the transport tables: TCP
(tcp_flows), RDMA queue pairs (rdma_flows) and each flow's rate while sending (flow_pace). Nothing here judges."""
