"""Training workloads shipped for demos and tests: real DDP / Horovod jobs and an exact-byte socket ring."""
