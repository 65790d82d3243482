"""What several commands share: executor, sharding, lease and podgrouper options, and the
scheduler configuration file."""

from __future__ import annotations

import enum
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kai_ray.api.config import SchedulerConfig
from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.api.scheduler_conf import SchedulerConfigError, load_scheduler_config
from kai_ray.cli.app import fail
from kai_ray.cluster.kube.bind_mode import BindMode
from kai_ray.distributed.executor import Executor

if TYPE_CHECKING:
    from kai_ray.cluster.kube.grouping import PodGrouper
    from kai_ray.cluster.kube.leader import LeaseTiming


class ExecutorName(enum.StrEnum):
    LOCAL = "local"
    RAY = "ray"


ExecutorOption = Annotated[
    ExecutorName, typer.Option("--executor", help="Rank nodes in-process or in Ray shards.")
]
BindModeOption = Annotated[
    BindMode,
    typer.Option(
        "--bind-mode",
        help="bindrequest: KAI's BindRequests, carried out by the binder; direct: the scheduler binds "
        "pods itself (one write per pod, binds announced per PodGroup).",
    ),
]
ShardsOption = Annotated[int, typer.Option("--shards", min=1, help="Node shards for --executor ray.")]


class ShardBy(enum.StrEnum):
    NONE = "none"
    NODE_POOL = "node-pool"
    JOBS = "jobs"


ShardByOption = Annotated[
    ShardBy,
    typer.Option(
        "--shard-by",
        help=f"node-pool: schedule each node pool ({NODE_POOL_LABEL} label on nodes, queues, PodGroups) "
        "whole as its own shard, as KAI's SchedulingShards do; with --executor ray, one Ray task per "
        "pool (--shards is then unused). jobs (bench only): split cycles, nodes and jobs dealt to "
        "--shards parts that place pods and search victims in parallel (Ray actors with --executor "
        "ray), see docs/sharding.md.",
    ),
]
RayAddressOption = Annotated[
    str | None, typer.Option("--ray-address", help="Join this Ray cluster instead of starting a local one.")
]


KubeconfigOption = Annotated[
    Path | None,
    typer.Option("--kubeconfig", help="The cluster; without it, the in-cluster service account."),
]
SchedulerNameOption = Annotated[
    str, typer.Option("--scheduler-name", help="The pods' spec.schedulerName this process answers to.")
]
LeaseNamespaceOption = Annotated[
    str, typer.Option("--lease-namespace", help="Namespace of the leader Lease.")
]
IdentityOption = Annotated[str | None, typer.Option("--identity", help="Leader-election identity.")]
LeaseDurationOption = Annotated[
    float, typer.Option("--lease-duration", help="Seconds a standby waits on an unrenewed lease.")
]
RenewDeadlineOption = Annotated[
    float, typer.Option("--renew-deadline", help="Seconds the leader may fail to renew before it is fenced.")
]
MetricsAddressOption = Annotated[
    str,
    typer.Option("--metrics-address", help="host:port for /metrics, /healthz and /readyz; empty to disable."),
]
RetryPeriodOption = Annotated[float, typer.Option("--retry-period", help="Seconds between lease attempts.")]
QueueLabelOption = Annotated[
    str, typer.Option("--queue-label-key", help="Pod/workload label naming its queue (KAI's default).")
]
NodePoolLabelOption = Annotated[
    str, typer.Option("--nodepool-label-key", help="Label a PodGroup inherits to pick a node pool.")
]
DefaultsConfigMapOption = Annotated[
    str | None,
    typer.Option(
        "--default-priorities-configmap",
        help="NAMESPACE/NAME of the ConfigMap of default priorities per workload type.",
    ),
]


def executor_for(
    name: ExecutorName, shards: int, address: str | None, pool_label: str = NODE_POOL_LABEL
) -> Executor | None:
    """None means the engine's default, in-process executor. Ray's shards keep node pools apart."""
    if name == ExecutorName.LOCAL:
        return None
    from kai_ray.distributed.ray_executor import RayExecutor

    return RayExecutor(shards, address, pool_label=pool_label)


def grouper_factory(
    queue_label_key: str, nodepool_label_key: str, defaults_config_map: str | None
) -> Callable[[Any], PodGrouper]:
    """The operators' podgrouper, built over the API client `serve` or `podgrouper` connects with."""
    from kai_ray_operators import ConfigMapRef, GroupingConfig
    from kai_ray_operators.controller import PodGroupController

    reference = None
    if defaults_config_map is not None:
        namespace, _, name = defaults_config_map.partition("/")
        if not namespace or not name:
            fail([f"--default-priorities-configmap {defaults_config_map!r}: expected NAMESPACE/NAME"])
        reference = ConfigMapRef(name, namespace)
    config = GroupingConfig(
        queue_label_key=queue_label_key, node_pool_label_key=nodepool_label_key, defaults_config_map=reference
    )
    return lambda api: PodGroupController(api, config)


def lease_timing(duration: float, renew_deadline: float, retry_period: float) -> LeaseTiming:
    from kai_ray.cluster.kube.leader import LeaseTiming

    try:
        return LeaseTiming(duration, renew_deadline, retry_period)
    except ValueError as exc:
        fail([str(exc)])


def scheduler_config(path: Path | None) -> SchedulerConfig:
    """KAI's scheduler configuration file, its warnings on stderr; bad files exit 2, as `serve` does."""
    if path is None:
        return SchedulerConfig()
    try:
        config, warnings = load_scheduler_config(path)
    except SchedulerConfigError as exc:
        fail(exc.problems or [str(exc)])
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)
    return config
