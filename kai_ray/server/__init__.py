"""The long-running service: the scheduling loop, the `serve` process, its metrics and logs."""
