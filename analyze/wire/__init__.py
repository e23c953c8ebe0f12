"""What the wire itself says beyond bytes: the hosts' clock offsets from packets seen on both ends (clocks), and
why a transfer is not at line rate, from TCP's headers (transport)."""
