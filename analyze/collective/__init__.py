"""The collective inference: which hosts talk in which shape (topology), where the iterations are in the bytes
(staircase, iterations), and the NCCL log's rings when given (nccl_log); inference.add_collective puts them
together for a result; resent takes the bytes sent twice out of S. Reads flow and series tables, never captures."""
