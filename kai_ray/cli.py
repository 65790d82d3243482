"""The `kai-ray` command line."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from kai_ray import cli_api
from kai_ray.api.config import SchedulerConfig
from kai_ray.api.constants import NODE_POOL_LABEL, QUEUE_LABEL
from kai_ray.api.manifests import read_manifest_documents
from kai_ray.api.scheduler_conf import SchedulerConfigError, load_scheduler_config
from kai_ray.api.usage_db import parse_duration
from kai_ray.bench.emit import write_scenario
from kai_ray.bench.render import render_results
from kai_ray.bench.runner import BenchResult, run_compare, run_shape, run_split_compare, run_split_shape
from kai_ray.bench.shapes import SHAPES, build_shape
from kai_ray.cli_api import Output, OutputOption
from kai_ray.cli_help import KaiRayTyper
from kai_ray.cluster.kube.bind_mode import BindMode
from kai_ray.cluster.sim.past_usage import PastUsage, PastUsageError, read_past_usage, read_usage_file
from kai_ray.cluster.sim.scenario import ScenarioError, is_scenario_file, load_scenario
from kai_ray.cluster.sim.simulator import SimulatedCluster
from kai_ray.devcluster.control_plane import ControllerManager
from kai_ray.distributed.executor import Executor
from kai_ray.engine.usage import UsageRecorder
from kai_ray.model.objects import ClusterState
from kai_ray.report.scenario_json import render_json
from kai_ray.report.table import render_table, terminal_console
from kai_ray.split.cycle import LocalParts, SplitCycles

if TYPE_CHECKING:
    from kai_ray.cluster.kube.grouping import PodGrouper
    from kai_ray.cluster.kube.leader import LeaseTiming
    from kai_ray.server.api_serve import GrpcOptions

app = KaiRayTyper(help="kai-ray: a Ray-native, KAI-compatible GPU scheduler.", no_args_is_help=True)


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


@app.callback()
def main() -> None:
    """Schedule GPU workloads the way KAI Scheduler does."""


def _executor(
    name: ExecutorName, shards: int, address: str | None, pool_label: str = NODE_POOL_LABEL
) -> Executor | None:
    """None means the engine's default, in-process executor. Ray's shards keep node pools apart."""
    if name == ExecutorName.LOCAL:
        return None
    from kai_ray.distributed.ray_executor import RayExecutor

    return RayExecutor(shards, address, pool_label=pool_label)


def _grouper_factory(
    queue_label_key: str, nodepool_label_key: str, defaults_config_map: str | None
) -> Callable[[Any], PodGrouper]:
    """The operators' podgrouper, built over the API client `serve` or `podgrouper` connects with."""
    from kai_ray_operators import ConfigMapRef, GroupingConfig
    from kai_ray_operators.controller import PodGroupController

    reference = None
    if defaults_config_map is not None:
        namespace, _, name = defaults_config_map.partition("/")
        if not namespace or not name:
            _fail([f"--default-priorities-configmap {defaults_config_map!r}: expected NAMESPACE/NAME"])
        reference = ConfigMapRef(name, namespace)
    config = GroupingConfig(
        queue_label_key=queue_label_key, node_pool_label_key=nodepool_label_key, defaults_config_map=reference
    )
    return lambda api: PodGroupController(api, config)


def _lease_timing(duration: float, renew_deadline: float, retry_period: float) -> LeaseTiming:
    from kai_ray.cluster.kube.leader import LeaseTiming

    try:
        return LeaseTiming(duration, renew_deadline, retry_period)
    except ValueError as exc:
        _fail([str(exc)])


def _fail(problems: list[str]) -> NoReturn:
    for line in problems:
        typer.echo(line, err=True)
    raise typer.Exit(code=2)


@dataclass(frozen=True)
class _Loaded:
    """What `simulate` runs: the cluster, its config, time-based fair share, and how many cycles."""

    state: ClusterState
    config: SchedulerConfig
    recorder: UsageRecorder | None
    step: float
    cycles: int


def _load(path: Path, cycles: int | None, config_file: Path | None, usage: _UsageOptions) -> _Loaded:
    if is_scenario_file(path):
        if config_file is not None:
            _fail([f"{path}: a conformance scenario carries its own config; --config is for manifests"])
        try:
            scenario = load_scenario(path)
            inline = read_past_usage(path)
        except (ScenarioError, PastUsageError) as exc:
            _fail([str(exc)])
        if inline is not None and usage.stated is not None:
            _fail([f"{path}: the scenario states its usage already; --usage is for manifests"])
        config, recorder, step = _with_usage(
            scenario.state, scenario.config, inline or usage.stated, usage.step
        )
        return _Loaded(scenario.state, config, recorder, step, cycles or scenario.cycles)
    from kai_ray_operators.manifests import cluster_from_workload_documents

    if path.is_dir():
        _refuse_scenario_directory(path)
    config = _scheduler_config(config_file)
    documents, read_problems = read_manifest_documents(path)
    if not documents and not read_problems:
        _fail([f"{path}: no Kubernetes manifests in it (looked for *.yaml, *.yml and *.json files)"])
    state, problems = cluster_from_workload_documents(documents, read_problems)
    for notice in (p for p in problems if p.warning):
        typer.echo(f"warning: {notice}", err=True)
    errors = [str(p) for p in problems if not p.warning]
    if errors:
        _fail(errors)
    config, recorder, step = _with_usage(state, config, usage.stated, usage.step)
    return _Loaded(state, config, recorder, step, cycles or 1)


def _simulate_pools(loaded: _Loaded, executor: ExecutorName, ray_address: str | None, output: Output) -> None:
    """`simulate --shard-by node-pool`: each pool's shard on its own (kai_ray.split.pool_runner)."""
    from kai_ray.model.pools import off_pool_tasks
    from kai_ray.report.pools import render_pools_json, render_pools_table
    from kai_ray.split.pool_runner import LocalPoolRunner, PoolRunner, RayPoolRunner, simulate_pools

    if loaded.recorder is not None:
        _fail(["--shard-by node-pool: time-based fair share (usage) is not supported per node pool yet"])
    for off in off_pool_tasks(loaded.state, NODE_POOL_LABEL):
        typer.echo(f"warning: {off.describe()}", err=True)
    runner: PoolRunner = RayPoolRunner(ray_address) if executor == ExecutorName.RAY else LocalPoolRunner()
    per_pool = simulate_pools(loaded.state, loaded.config, loaded.cycles, runner)
    if output == Output.JSON:
        typer.echo(render_pools_json(per_pool))
    else:
        render_pools_table(per_pool, terminal_console())


class _UsageOptions:
    """`simulate`'s time-based fair share options: stated past usage and the step between cycles."""

    def __init__(self, usage_file: Path | None, step: str | None) -> None:
        try:
            self.stated = None if usage_file is None else read_usage_file(usage_file)
        except PastUsageError as exc:
            _fail([str(exc)])
        try:
            self.step = None if step is None else parse_duration(step)
        except ValueError as exc:
            _fail([f"--clock-step: {exc}"])
        if self.step is not None and self.step < 0:
            _fail([f"--clock-step: must not be negative, got {step!r}"])


def _with_usage(
    state: ClusterState, config: SchedulerConfig, stated: PastUsage | None, step: float | None
) -> tuple[SchedulerConfig, UsageRecorder | None, float]:
    """The config with time-based fair share on when a usage block or usageDBConfig asks for it,
    its recorder, and the clock step: one query resolution unless given; without usage, none unless
    given (a scenario's clock stands still, as in KAI's harness)."""
    if stated is not None:
        update: dict[str, Any] = {"usage_db": stated.usage_db}
        if stated.k_value is not None:
            update["k_value"] = stated.k_value
        config = config.model_copy(update=update)
    if config.usage_db is None:
        return config, None, step or 0.0
    params = config.usage_db.params
    parents = {queue.name: queue.parent for queue in state.queues}
    recorder = UsageRecorder(params, stated.with_parents(parents) if stated is not None else None)
    return config, recorder, params.query_resolution_seconds if step is None else step


def _refuse_scenario_directory(path: Path) -> None:
    """A directory of conformance scenarios is not one cluster: each scenario is its own, so they
    are run one file at a time (reading them as manifests would only fail on every document)."""
    scenarios = sorted(p for p in path.rglob("*") if is_scenario_file(p))
    if not scenarios:
        return
    named = ", ".join(str(p.relative_to(path)) for p in scenarios[:3])
    more = f" and {len(scenarios) - 3} more" if len(scenarios) > 3 else ""
    _fail(
        [
            f"{path}: a directory of conformance scenarios ({named}{more}); scenarios are run one file "
            f"at a time: kai-ray simulate {scenarios[0]}"
        ]
    )


def _scheduler_config(path: Path | None) -> SchedulerConfig:
    """KAI's scheduler configuration file, its warnings on stderr; bad files exit 2, as `serve` does."""
    if path is None:
        return SchedulerConfig()
    try:
        config, warnings = load_scheduler_config(path)
    except SchedulerConfigError as exc:
        _fail(exc.problems or [str(exc)])
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)
    return config


@app.command()
def simulate(
    path: Annotated[
        Path, typer.Argument(help="A conformance scenario file, or Kubernetes manifests (file or directory).")
    ],
    cycles: Annotated[int | None, typer.Option("--cycles", min=1, help="Scheduling cycles to run.")] = None,
    output: OutputOption = Output.TABLE,
    executor: ExecutorOption = ExecutorName.LOCAL,
    shards: ShardsOption = 2,
    ray_address: RayAddressOption = None,
    shard_by: ShardByOption = ShardBy.NONE,
    config_file: Annotated[
        Path | None,
        typer.Option("--config", help="KAI's scheduler configuration (config.yaml or its ConfigMap)."),
    ] = None,
    usage_file: Annotated[
        Path | None,
        typer.Option("--usage", help="Past queue usage for time-based fair share (docs/fairshare.md)."),
    ] = None,
    clock_step: Annotated[
        str | None,
        typer.Option(
            "--clock-step",
            help="Time between cycles, e.g. 10m (default: the usage resolution, 1m; 0 without usage).",
        ),
    ] = None,
) -> None:
    """Schedule PATH on the embedded simulated cluster and print the result."""
    if not path.exists():
        _fail([f"{path}: no such file or directory"])
    loaded = _load(path, cycles, config_file, _UsageOptions(usage_file, clock_step))
    if shard_by == ShardBy.NODE_POOL:
        _simulate_pools(loaded, executor, ray_address, output)
        return
    if shard_by == ShardBy.JOBS:
        _fail(["--shard-by jobs: split cycles run in `kai-ray bench` only (see docs/sharding.md)"])
    chosen = _executor(executor, shards, ray_address)
    cluster = SimulatedCluster(loaded.state, loaded.config, chosen, loaded.recorder, loaded.step)
    results = cluster.run(loaded.cycles)
    if output == Output.JSON:
        typer.echo(render_json(results))
    else:
        render_table(results, terminal_console())


@app.command()
def bench(
    shape: Annotated[
        str | None,
        typer.Option(
            "--shape",
            help=f"Shape name: {', '.join([*SHAPES, 'churn-NxP'])} (N nodes, J jobs, P pods each), "
            "e.g. fill-500x4000.",
            show_default=False,
        ),
    ] = None,
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Cycles to time.")] = 3,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the result here.")] = None,
    emit_scenario: Annotated[
        Path | None,
        typer.Option("--emit-scenario", help="Write the shape as a conformance scenario and exit untimed."),
    ] = None,
    executor: ExecutorOption = ExecutorName.LOCAL,
    shards: ShardsOption = 2,
    ray_address: RayAddressOption = None,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Time the local executor and Ray with 1 and --shards shards on the same shape, their "
            "cycles taking turns; prints each median over the local one and a projection fitted on both "
            "Ray runs.",
        ),
    ] = False,
    kube: Annotated[
        bool,
        typer.Option(
            "--kube", help="End to end on a dev cluster (API server, etcd, kwok) instead of a shape."
        ),
    ] = False,
    grpc: Annotated[
        bool,
        typer.Option(
            "--grpc",
            help="The gRPC API on the simulated cluster: submits/s, Explain latency, cycle time.",
        ),
    ] = False,
    nodes: Annotated[int, typer.Option("--nodes", min=1, help="With --kube or --grpc: 8-GPU nodes.")] = 500,
    pods: Annotated[
        int,
        typer.Option(
            "--pods", min=1, help="With --kube: one-GPU pods; with --grpc: pods, in gangs of 4 × 2 GPUs."
        ),
    ] = 4000,
    clients: Annotated[
        int, typer.Option("--clients", min=1, help="With --grpc: concurrent clients (threads, own channels).")
    ] = 8,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="With --kube: give up after this many seconds.")
    ] = 600.0,
    bind_mode: BindModeOption = BindMode.BIND_REQUEST,
    shard_by: ShardByOption = ShardBy.NONE,
    same_snapshot: Annotated[
        bool,
        typer.Option(
            "--same-snapshot",
            help="Time every cycle over one snapshot compiled once (a served scheduler's steady "
            "state: unchanged pods keep their specs) instead of a shape built afresh for each.",
        ),
    ] = False,
) -> None:
    """Time scheduling cycles on a generated cluster shape, or end to end with --kube or --grpc."""
    if grpc:
        from kai_ray.bench import grpc_bench

        try:
            grpc_result = grpc_bench.run_grpc_bench(
                nodes, pods, clients=clients, repeat=repeat, progress=lambda line: typer.echo(line, err=True)
            )
        except ValueError as exc:
            _fail([str(exc)])
        grpc_bench.render(grpc_result, terminal_console())
        if json_file is not None:
            json_file.write_text(json.dumps(grpc_result.as_json(), indent=2) + "\n")
        if grpc_result.errors:
            raise typer.Exit(code=1)
        return
    if kube:
        from kai_ray.bench import burst as burst_bench
        from kai_ray.bench import kube as kube_bench
        from kai_ray.devcluster import DevClusterError

        burst = burst_bench.burst_sizes(shape) if shape is not None else None
        if burst is not None:
            try:
                burst_result = burst_bench.run_burst_bench(
                    *burst, progress=lambda line: typer.echo(line, err=True)
                )
            except (TimeoutError, DevClusterError) as exc:
                _fail([str(exc)])
            burst_bench.render(burst_result, terminal_console())
            if json_file is not None:
                json_file.write_text(json.dumps(burst_result.as_json(), indent=2) + "\n")
            return
        try:
            idle_sizes = kube_bench.idle_sizes(shape) if shape is not None else None
            kube_result = kube_bench.run_kube_bench(
                _grouper_factory(QUEUE_LABEL, NODE_POOL_LABEL, None),
                *(idle_sizes or (nodes, pods)),
                timeout=timeout,
                progress=lambda line: typer.echo(line, err=True),
                bind_mode=bind_mode,
                idle_seconds=kube_bench.IDLE_WINDOW_SECONDS if idle_sizes is not None else 0.0,
            )
        except (ValueError, DevClusterError) as exc:
            _fail([str(exc)])
        kube_bench.render(kube_result, terminal_console())
        if json_file is not None:
            json_file.write_text(json.dumps(kube_result.as_json(), indent=2) + "\n")
        if kube_result.bound < kube_result.pods:
            raise typer.Exit(code=1)
        return
    if shape is None:
        _fail(["give --shape NAME, or --kube, or --grpc"])
    try:
        if emit_scenario is not None:
            write_scenario(build_shape(shape), emit_scenario)
            typer.echo(f"wrote {emit_scenario}")
            return
        if shard_by == ShardBy.NODE_POOL:
            if same_snapshot:
                _fail(["--same-snapshot: node-pool runs schedule each pool's own cluster; leave it out"])
            _bench_pools(shape, repeat, executor == ExecutorName.RAY, ray_address, json_file)
            return
        if shard_by == ShardBy.JOBS:
            split = _split_cycles(executor, shards, ray_address)
            results = (
                run_split_compare(shape, repeat, split, same_snapshot)
                if compare
                else [run_split_shape(shape, repeat, split, same_snapshot)]
            )
            render_results(shape, results, terminal_console())
            _write_results(json_file, shape, results)
            return
        if compare:
            from kai_ray.distributed.ray_executor import RayExecutor

            results = run_compare(
                shape,
                repeat,
                lambda count: RayExecutor(count, ray_address, pool_label=NODE_POOL_LABEL),
                shards,
                same_snapshot,
            )
        else:
            chosen = _executor(executor, shards, ray_address)
            results = [run_shape(shape, repeat, chosen, shards if chosen is not None else 1, same_snapshot)]
    except ValueError as exc:
        _fail([str(exc)])
    render_results(shape, results, terminal_console())
    _write_results(json_file, shape, results)


def _write_results(json_file: Path | None, shape: str, results: list[BenchResult]) -> None:
    if json_file is not None:
        document = (
            results[0].as_json()
            if len(results) == 1
            else {"shape": shape, "results": [r.as_json() for r in results]}
        )
        json_file.write_text(json.dumps(document, indent=2) + "\n")


def _split_cycles(executor: ExecutorName, parts: int, address: str | None) -> SplitCycles:
    """Split cycles over `parts` parts: Ray actors, or in turn in this process (the reference)."""
    if executor == ExecutorName.LOCAL:
        return SplitCycles(parts, LocalParts(NODE_POOL_LABEL))
    from kai_ray.split.ray_parts import RayParts

    return SplitCycles(parts, RayParts(parts, address, pool_label=NODE_POOL_LABEL))


def _bench_pools(
    shape: str, repeat: int, use_ray: bool, ray_address: str | None, json_file: Path | None
) -> None:
    """`bench --shard-by node-pool`: the shape whole, by pool in-process, and by pool in Ray."""
    from kai_ray.bench.pools import render_pool_bench, run_pool_shape

    result = run_pool_shape(shape, repeat, ray_address, use_ray)
    render_pool_bench(result, terminal_console())
    if json_file is not None:
        json_file.write_text(json.dumps(result.as_json(), indent=2) + "\n")


devcluster_app = KaiRayTyper(
    help="A real kube-apiserver + etcd on loopback, for trying kai-ray out and for tests."
)
app.add_typer(devcluster_app, name="devcluster")


@devcluster_app.command("up")
def devcluster_up(
    directory: Annotated[Path, typer.Option("--dir", help="Where the kubeconfig, logs and state go.")],
    nodes: Annotated[int, typer.Option("--nodes", min=0, help="Fake GPU nodes to create.")] = 0,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", min=0, help="GPUs on each fake node.")] = 8,
    bin_dir: Annotated[
        Path | None,
        typer.Option(
            "--bin-dir",
            help="Use the etcd and kube-apiserver (and kwok, if there) in DIR instead of building them.",
        ),
    ] = None,
    crd_dir: Annotated[
        Path | None,
        typer.Option(
            "--crd-dir", help="Install the CRDs in these YAML files instead of kai-ray's generated ones."
        ),
    ] = None,
    controller_manager: Annotated[
        ControllerManager,
        typer.Option(
            "--controller-manager",
            help="Run kube-controller-manager's Deployment, ReplicaSet, Job, garbage-collector, "
            "namespace and PV-binder controllers: auto (when its binary was built), on, off.",
        ),
    ] = "auto",
) -> None:
    """Start etcd, kube-apiserver, a pod runner and controllers; install CRDs and KAI's default objects."""
    from kai_ray import devcluster

    # Checked here too so the one-line error names the flag (start() checks both again).
    try:
        if bin_dir is not None:
            devcluster.require_binaries(bin_dir)
    except devcluster.DevClusterError as exc:
        _fail([f"--bin-dir: {exc}"])
    try:
        if crd_dir is not None:
            devcluster.crd_documents(crd_dir)
    except devcluster.DevClusterError as exc:
        _fail([f"--crd-dir: {exc}"])
    try:
        cluster = devcluster.start(
            directory,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            bin_dir=bin_dir,
            crd_dir=crd_dir,
            controller_manager=controller_manager,
        )
    except devcluster.DevClusterError as exc:
        _fail([str(exc)])
    typer.echo(f"kubeconfig: {cluster.kubeconfig}")
    typer.echo(f"server: {cluster.server}")
    typer.echo(f"controllers: {', '.join(cluster.controllers) or 'none (no kube-controller-manager)'}")


@devcluster_app.command("down")
def devcluster_down(
    directory: Annotated[Path, typer.Option("--dir", help="The directory given to `up`.")],
) -> None:
    """Stop everything `devcluster up` started in that directory."""
    from kai_ray import devcluster

    devcluster.stop(directory)
    typer.echo(f"stopped {directory}")


@app.command()
def serve(
    kubeconfig: KubeconfigOption = None,
    scheduler_name: SchedulerNameOption = "kai-scheduler",
    config_file: Annotated[
        Path | None,
        typer.Option("--config", help="KAI's scheduler configuration (config.yaml or its ConfigMap)."),
    ] = None,
    executor: ExecutorOption = ExecutorName.LOCAL,
    shards: ShardsOption = 2,
    ray_address: RayAddressOption = None,
    period: Annotated[
        float,
        typer.Option("--period", min=0.05, help="Longest wait between cycles while work may be due."),
    ] = 1.0,
    idle_period: Annotated[
        float,
        typer.Option(
            "--idle-period",
            min=0.05,
            help="Longest wait after a cycle that found nothing to do, unless the cluster changes.",
        ),
    ] = 10.0,
    metrics_address: MetricsAddressOption = "127.0.0.1:8080",
    lease_namespace: LeaseNamespaceOption = "default",
    identity: IdentityOption = None,
    bind_backoff_limit: Annotated[
        int, typer.Option("--bind-backoff-limit", min=0, help="Binding attempts per BindRequest.")
    ] = 3,
    bind_mode: BindModeOption = BindMode.BIND_REQUEST,
    lease_duration: LeaseDurationOption = 15.0,
    renew_deadline: RenewDeadlineOption = 10.0,
    retry_period: RetryPeriodOption = 2.0,
    no_podgrouper: Annotated[
        bool,
        typer.Option(
            "--no-podgrouper", help="Do not group pods (another process does: `kai-ray podgrouper`, KAI's)."
        ),
    ] = False,
    queue_label_key: QueueLabelOption = QUEUE_LABEL,
    nodepool_label_key: NodePoolLabelOption = NODE_POOL_LABEL,
    default_priorities_configmap: DefaultsConfigMapOption = None,
    grpc_address: Annotated[
        str | None,
        typer.Option(
            "--grpc-address",
            metavar="HOST:PORT",
            help="Serve the gRPC API (docs/grpc.md) here; port 0 picks a free one. "
            "Default: off, or 127.0.0.1:50051 with --sim/--sim-nodes.",
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="PEM certificate of the gRPC server (with --tls-key).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="PEM private key of --tls-cert.")] = None,
    tls_client_ca: Annotated[
        Path | None,
        typer.Option("--tls-client-ca", help="Require gRPC clients' certificates signed by this CA (mTLS)."),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="Bearer tokens of the gRPC API, one 'TOKEN NAMESPACES' per line (NAMESPACES: a,b or *).",
        ),
    ] = None,
    sim: Annotated[
        Path | None,
        typer.Option(
            "--sim",
            metavar="PATH",
            help="No Kubernetes: schedule a simulated cluster made from the manifests in PATH (a file "
            "or a directory, as `simulate` reads).",
        ),
    ] = None,
    sim_nodes: Annotated[
        int | None,
        typer.Option(
            "--sim-nodes",
            min=1,
            help="No Kubernetes: a simulated cluster of N nodes x 8 GPUs with KAI's default queues.",
        ),
    ] = None,
) -> None:
    """Schedule a Kubernetes cluster as KAI Scheduler does, until SIGTERM.

    Pods of this scheduler get their PodGroups from the podgrouper running in the
    same process (one per workload, as KAI's podgrouper makes them) unless
    `--no-podgrouper` is given. With `--sim DIR` or `--sim-nodes N` it schedules an
    embedded simulated cluster instead and serves the gRPC API on it.
    """
    from kai_ray_operators.manifests import prepare_manifests

    from kai_ray.server.api_serve import GrpcOptions
    from kai_ray.server.serve import ServeOptions, serve_forever

    def grpc_options(default_address: str | None) -> GrpcOptions | None:
        address = grpc_address if grpc_address is not None else default_address
        if not address:
            return None
        return GrpcOptions(address, tls_cert, tls_key, tls_client_ca, token_file)

    if sim is not None or sim_nodes is not None:
        api = grpc_options(DEFAULT_SIM_GRPC_ADDRESS)
        assert api is not None  # a default address is given
        raise typer.Exit(code=_serve_simulated(sim, sim_nodes, api, metrics_address))

    options = ServeOptions(
        kubeconfig=kubeconfig,
        scheduler_name=scheduler_name,
        period=period,
        idle_period=idle_period,
        metrics_address=metrics_address,
        lease_namespace=lease_namespace,
        identity=identity,
        config_file=config_file,
        bind_backoff_limit=bind_backoff_limit,
        bind_mode=bind_mode,
        lease_timing=_lease_timing(lease_duration, renew_deadline, retry_period),
        grouper=None
        if no_podgrouper
        else _grouper_factory(queue_label_key, nodepool_label_key, default_priorities_configmap),
        api=grpc_options(None),
        api_grouper=prepare_manifests,
    )
    raise typer.Exit(
        code=serve_forever(options, _executor(executor, shards, ray_address, nodepool_label_key))
    )


DEFAULT_SIM_GRPC_ADDRESS = "127.0.0.1:50051"


def _serve_simulated(
    sim: Path | None, sim_nodes: int | None, options: GrpcOptions, metrics_address: str
) -> int:
    """`serve --sim DIR` / `--sim-nodes N`: the simulated backend, with the operators' podgrouper
    so a RayJob or PyTorchJob in DIR, or submitted as manifests, is grouped as on a cluster."""
    from kai_ray_operators.manifests import prepare_manifests

    from kai_ray.rpc.sim_backend import SimBackend, SimSourceError
    from kai_ray.server.api_serve import serve_simulated

    if sim is not None and sim_nodes is not None:
        _fail(["give --sim or --sim-nodes, not both"])
    if sim is not None:
        if not sim.exists():
            _fail([f"--sim: {sim} does not exist"])
        try:
            backend = SimBackend.from_directory(sim, grouper=prepare_manifests)
        except SimSourceError as exc:
            _fail([str(problem) for problem in exc.problems])
        what = f"the manifests in {sim}"
    else:
        assert sim_nodes is not None
        backend = SimBackend.from_nodes(sim_nodes)
        what = f"{sim_nodes} nodes x 8 GPUs"
    return serve_simulated(backend, what, prepare_manifests, options, metrics_address)


@app.command()
def podgrouper(
    kubeconfig: KubeconfigOption = None,
    scheduler_name: SchedulerNameOption = "kai-scheduler",
    period: Annotated[
        float, typer.Option("--period", min=0.05, help="Seconds between passes when nothing changes.")
    ] = 1.0,
    metrics_address: MetricsAddressOption = "127.0.0.1:8081",
    lease_namespace: LeaseNamespaceOption = "default",
    identity: IdentityOption = None,
    lease_duration: LeaseDurationOption = 15.0,
    renew_deadline: RenewDeadlineOption = 10.0,
    retry_period: RetryPeriodOption = 2.0,
    queue_label_key: QueueLabelOption = QUEUE_LABEL,
    nodepool_label_key: NodePoolLabelOption = NODE_POOL_LABEL,
    default_priorities_configmap: DefaultsConfigMapOption = None,
) -> None:
    """Give pods their PodGroups as KAI's podgrouper does, alone, until SIGTERM.

    For `serve --no-podgrouper` or KAI's own scheduler; it has its own leader lease."""
    from kai_ray.server.podgrouper import PodGrouperOptions, run_podgrouper

    options = PodGrouperOptions(
        kubeconfig=kubeconfig,
        scheduler_name=scheduler_name,
        period=period,
        lease_namespace=lease_namespace,
        identity=identity,
        lease_timing=_lease_timing(lease_duration, renew_deadline, retry_period),
        metrics_address=metrics_address,
    )
    factory = _grouper_factory(queue_label_key, nodepool_label_key, default_priorities_configmap)
    raise typer.Exit(code=run_podgrouper(options, factory))


@app.command()
def group(
    case: Annotated[
        Path, typer.Argument(help="A grouping conformance case (conformance/grouping/FORMAT.md).")
    ],
    output: OutputOption = Output.TABLE,
) -> None:
    """Group the case's pod as KAI's podgrouper would and print its PodGroup metadata."""
    from kai_ray_operators import GroupingError
    from kai_ray_operators.conformance import CaseError, load_case, run_case
    from kai_ray_operators.table import print_grouping

    try:
        result = run_case(load_case(case))
    except CaseError as exc:
        _fail([str(exc)])
    except GroupingError as exc:
        typer.echo(f"cannot group: {exc}", err=True)
        raise typer.Exit(code=1) from None
    if output == Output.JSON:
        typer.echo(json.dumps(result, indent=2, sort_keys=True))
        return
    print_grouping(result, terminal_console())


app.add_typer(cli_api.app)  # submit, status, watch, explain, queues, what-if: the gRPC API's client
