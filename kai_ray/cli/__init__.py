"""The `kai-ray` command line: one module per command group, registered here in the order the
help lists them (the order is this file's, not the modules' import order)."""

from __future__ import annotations

from kai_ray.cli import api, bench, devcluster, group, serve, simulate
from kai_ray.cli.app import app

__all__ = ["app"]

app.command()(simulate.simulate)
app.command()(bench.bench)
app.add_typer(devcluster.devcluster_app, name="devcluster")
app.command()(serve.serve)
app.command()(serve.podgrouper)
app.command()(group.group)
app.add_typer(api.app)  # submit, status, watch, explain, queues, what-if: the gRPC API's client
