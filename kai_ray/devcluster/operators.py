"""Upstream workload operators on the dev cluster: KubeRay's ray-operator and Kubeflow's training-operator.

Why: how KAI groups Ray and PyTorch workloads (``../shared/spec/integrations.md`` §2, §3)
depends on what these operators really do to the pods they create: KubeRay's kai-scheduler
batch plugin (``--batch-scheduler=kai-scheduler``, v1.5.0+) sets ``schedulerName`` and copies
the ``kai.scheduler/queue`` label, the training-operator puts its ``training.kubeflow.org/*``
labels on every replica.  So the Kubernetes tests run the real binaries, built from their Go
modules by ``kai_ray/devcluster/toolchain/build-operators.sh``, instead of imitating them.

Each operator is a process of the dev cluster: recorded in ``DIR/state.json`` like etcd and
the apiserver, so ``stop(DIR)`` (or ``kai-ray devcluster down``) ends it too and
``stop_operator`` ends it earlier.  Both use the admin kubeconfig, serve metrics and health on
free loopback ports and run without leader election (a single replica needs none, and no
Lease traffic then mixes into the audit log other tests read).  ``start_kuberay`` and
``start_training_operator`` install the operator's upstream CRDs first (idempotent), because an
operator started without them only fails minutes later, when its cache sync times out.

State.json is read, changed and written back without locking: start and stop operators from
one thread, not while another process changes the same cluster.

KubeRay's RayJob and RayService controllers call the Ray dashboard of a head pod once it runs
and is ready, by its Service's cluster DNS name, which nothing resolves here.  Keep
``--use-kubernetes-proxy`` off: the apiserver would be asked to proxy those calls to the fake
pods' kwok IPs (10.0.0.0/16).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from kai_ray.devcluster.binaries import (
    TOOLCHAIN,
    DevClusterError,
    build_operators,
    repo_root,
    require_binaries,
)
from kai_ray.devcluster.control_plane import DevCluster, _http_ok
from kai_ray.devcluster.processes import (
    LOOPBACK,
    ExitedDuringStartup,
    Launcher,
    free_ports,
    read_state,
    terminate,
    wait_until,
    write_private,
    write_state,
)
from kai_ray.devcluster.seeding import create_ignoring_conflict, install_crds

__all__ = [
    "KUBERAY",
    "MPIJOB_CRD",
    "TRAINING_OPERATOR",
    "TRAINING_OPERATOR_NAMESPACE",
    "OperatorProcess",
    "install_mpijob_v1_crd",
    "install_upstream_crds",
    "start_kuberay",
    "start_training_operator",
    "stop_operator",
    "training_operator_crd_dir",
    "upstream_crd_dir",
]

UpstreamProject = Literal["kuberay", "kubeflow", "argo"]

#: Process names in state.json (and log file stems); also the binaries' names.
KUBERAY = "ray-operator"
TRAINING_OPERATOR = "training-operator"

#: Where the training-operator keeps its webhook Secret: upstream's install namespace, and the
#: default of its ``MY_POD_NAMESPACE``.
TRAINING_OPERATOR_NAMESPACE = "kubeflow"
#: The Secret upstream's kustomization creates empty; the operator's cert rotator fills it.
_WEBHOOK_SECRET = "training-operator-webhook-cert"
#: The training-operator's Go module; its version is the one ``toolchain/training-operator`` pins.
_TRAINING_OPERATOR_MODULE = "github.com/kubeflow/training-operator"
#: One CRD name for two APIs: mpi-operator's ``kubeflow.org/v2beta1`` MPIJob (in
#: ``../shared/crds/kubeflow``) and the training-operator's own ``kubeflow.org/v1`` one.
MPIJOB_CRD = "mpijobs.kubeflow.org"
#: Hard-coded in training-operator v1.8.1 (pkg/cert): where a pod mounts that Secret.  The
#: operator waits for the certificate to appear there before it registers its controllers.
_WEBHOOK_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
#: Key first: the operator goes on as soon as the certificate file exists, and the key it then
#: loads must already be the matching one.
_WEBHOOK_CERT_FILES = ("tls.key", "tls.crt")

_PORT_ATTEMPTS = 3


@dataclass(frozen=True)
class OperatorProcess:
    """A running operator of a dev cluster (what ``start_kuberay``/``start_training_operator`` return)."""

    name: str
    cluster_dir: Path
    pid: int
    log: Path
    metrics_url: str
    readyz_url: str

    def stop(self, grace: float = 10.0) -> None:
        """Stop this operator (same as ``stop_operator(self.cluster_dir, self.name)``)."""
        stop_operator(self.cluster_dir, self.name, grace)


def upstream_crd_dir(project: UpstreamProject, root: Path | None = None) -> Path:
    """``../shared/crds/PROJECT`` next to the checkout: the unmodified upstream CRDs.

    Test-only: it needs a checkout with ``../shared`` beside it (``repo_root``), which an
    installed kai-ray does not have; only the tests start operators.  Used by path, never
    copied into the repository (``shared/crds/README.md``): kai-ray's own CRDs are generated
    from its models, these belong to the operators.
    """
    root = repo_root() if root is None else root
    path = (root.parent / "shared" / "crds" / project).resolve()
    if not path.is_dir():
        raise DevClusterError(f"upstream CRDs for {project} not found in {path}")
    return path


def install_upstream_crds(api: Any, project: UpstreamProject, timeout: float = 120.0) -> list[str]:
    """Create ``project``'s upstream CRDs (already existing ones are kept) and wait until Established.

    ``kuberay``: RayCluster, RayJob, RayService.  ``kubeflow``: PyTorchJob (kubeflow.org/v1),
    MPIJob (mpi-operator's kubeflow.org/v2beta1) and TrainJob.  ``argo``: Workflow and
    WorkflowTaskResult (no Argo controller is built here).  Returns the CRD names.
    """
    return install_crds(api, upstream_crd_dir(project), timeout=timeout)


def training_operator_crd_dir() -> Path:
    """``manifests/base/crds`` of the training-operator's Go module, the version ``toolchain`` pins.

    The operator's own CRDs (PyTorchJob, TFJob, MPIJob v1, ...), found in the Go module cache
    the operator was built from by ``go list -m`` in the wrapper module (no download).  Only
    here is the ``kubeflow.org/v1`` MPIJob CRD: ``../shared/crds/kubeflow`` has mpi-operator's
    ``kubeflow.org/v2beta1`` under the same name.
    """
    wrapper = TOOLCHAIN / "training-operator"
    argv = ["go", "list", "-mod=readonly", "-m", "-f", "{{.Dir}}", _TRAINING_OPERATOR_MODULE]
    try:
        proc = subprocess.run(argv, cwd=wrapper, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DevClusterError(f"cannot ask Go where {_TRAINING_OPERATOR_MODULE} is: {exc}") from exc
    module_dir = proc.stdout.strip()
    path = Path(module_dir) / "manifests" / "base" / "crds"
    if proc.returncode != 0 or not module_dir or not path.is_dir():
        found = proc.stderr.strip() or f"no {path}"
        raise DevClusterError(
            f"the training-operator's CRDs are not in the Go module cache ({found}); "
            "`make kube-bins` downloads its module"
        )
    return path


def install_mpijob_v1_crd(api: Any, timeout: float = 120.0) -> str:
    """Create the training-operator's ``kubeflow.org/v1`` MPIJob CRD and wait until Established.

    ``start_training_operator(..., schemes=("mpijob", ...))`` needs it, and keeps CRDs that
    already exist, so install this first.  Its name is also mpi-operator's, whose v2beta1 CRD
    ``install_upstream_crds(api, "kubeflow")`` installs: a cluster serves one or the other.
    An existing ``mpijobs.kubeflow.org`` that does not serve v1 is a ``DevClusterError``,
    never replaced (deleting a CRD deletes every object of it).  Returns the CRD name.
    """
    from kubernetes import client

    ext: Any = client.ApiextensionsV1Api(api)  # typed for model objects; a plain dict body is fine
    body = yaml.safe_load((training_operator_crd_dir() / "kubeflow.org_mpijobs.yaml").read_text())
    create_ignoring_conflict(functools.partial(ext.create_custom_resource_definition, body=body))
    crd = ext.read_custom_resource_definition(MPIJOB_CRD)
    served = sorted(version.name for version in crd.spec.versions if version.served)
    if "v1" not in served:
        raise DevClusterError(
            f"CRD {MPIJOB_CRD} already exists and serves {', '.join(served)}, not the "
            "training-operator's v1: one cluster can hold only one MPIJob API"
        )

    def established() -> bool | None:
        status = ext.read_custom_resource_definition(MPIJOB_CRD).status
        conditions = (status.conditions if status else None) or []
        return True if any(c.type == "Established" and c.status == "True" for c in conditions) else None

    wait_until(f"CRD {MPIJOB_CRD} Established", established, timeout)
    return MPIJOB_CRD


def start_kuberay(
    cluster: DevCluster,
    *,
    bin_dir: Path | None = None,
    batch_scheduler: str | None = "kai-scheduler",
    die_with_parent: bool = False,
    timeout: float = 120.0,
) -> OperatorProcess:
    """Install KubeRay's CRDs and start its ray-operator against ``cluster``; return once it is ready.

    ``batch_scheduler`` is KubeRay's ``--batch-scheduler`` (``None`` for none): with
    ``kai-scheduler`` every head and worker pod gets ``schedulerName: kai-scheduler`` and the
    RayCluster's ``kai.scheduler/queue`` label.  An operator of this name already running on
    ``cluster`` is stopped first.  Ready means its ``/readyz`` answers; if it exits before,
    ``DevClusterError`` carries its log tail.
    """
    bin_dir = _operator_bin_dir(bin_dir, KUBERAY)
    with contextlib.closing(cluster.api_client()) as api:
        install_upstream_crds(api, "kuberay", timeout)

    def argv(metrics: str, probe: str, _: int) -> list[str]:
        return [
            str(bin_dir / KUBERAY),
            f"--kubeconfig={cluster.kubeconfig}",
            f"--metrics-addr={metrics}",
            f"--health-probe-bind-address={probe}",
            "--enable-leader-election=false",
            "--log-stdout-encoder=console",  # read by people in log tails, not by a log pipeline
            *([f"--batch-scheduler={batch_scheduler}"] if batch_scheduler else []),
        ]

    return _start(cluster, _Launch(KUBERAY, argv, None, None, die_with_parent, timeout))


def start_training_operator(
    cluster: DevCluster,
    *,
    bin_dir: Path | None = None,
    schemes: Sequence[str] = ("pytorchjob",),
    die_with_parent: bool = False,
    timeout: float = 120.0,
) -> OperatorProcess:
    """Install Kubeflow's CRDs and start the training-operator against ``cluster``; return once ready.

    ``schemes`` are its ``--enable-scheme`` values.  Only PyTorchJob by default: its other
    kinds (TFJob, MPIJob v1, ...) have no CRD here and a controller without its CRD makes the
    operator exit (for ``mpijob``, call ``install_mpijob_v1_crd`` first).  No gang scheduler is
    set, so it creates no PodGroups (KAI's podgrouper makes them); pods get the
    ``schedulerName`` of their replica templates.

    Out of a pod, the operator's webhook set-up needs what its Deployment provides: the
    ``kubeflow`` namespace with an empty ``training-operator-webhook-cert`` Secret (its cert
    rotator fills it) and that Secret's certificate as files in a fixed directory under /tmp
    (the kubelet's Secret volume, played here by copying).  No ValidatingWebhookConfiguration
    is created, so the apiserver never calls the webhook; its server still listens, on all
    interfaces (v1.8.1 has no flag for its host), on a free port.
    """
    from kubernetes import client

    bin_dir = _operator_bin_dir(bin_dir, TRAINING_OPERATOR)
    with contextlib.closing(cluster.api_client()) as api:
        install_upstream_crds(api, "kubeflow", timeout)
        core = client.CoreV1Api(api)
        create_ignoring_conflict(
            lambda: core.create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=TRAINING_OPERATOR_NAMESPACE))
            )
        )
        secret = client.V1Secret(metadata=client.V1ObjectMeta(name=_WEBHOOK_SECRET))
        create_ignoring_conflict(lambda: core.create_namespaced_secret(TRAINING_OPERATOR_NAMESPACE, secret))

    def argv(metrics: str, probe: str, webhook_port: int) -> list[str]:
        return [
            str(bin_dir / TRAINING_OPERATOR),
            f"--kubeconfig={cluster.kubeconfig}",
            f"--metrics-bind-address={metrics}",
            f"--health-probe-bind-address={probe}",
            f"--webhook-server-port={webhook_port}",
            "--leader-elect=false",
            *(f"--enable-scheme={scheme}" for scheme in schemes),
        ]

    env = {
        **os.environ,
        "MY_POD_NAMESPACE": TRAINING_OPERATOR_NAMESPACE,
        # The webhook server reads its certificate from $TMPDIR/k8s-webhook-server/serving-certs,
        # the cert rotator waits for it under the hard-coded /tmp path: make them one directory.
        "TMPDIR": str(_WEBHOOK_CERT_DIR.parents[1]),
    }
    _clear_webhook_cert()
    return _start(
        cluster, _Launch(TRAINING_OPERATOR, argv, env, _mirror_webhook_cert, die_with_parent, timeout)
    )


def stop_operator(cluster_dir: Path, name: str, grace: float = 10.0) -> None:
    """Stop the operator ``name`` (``KUBERAY`` or ``TRAINING_OPERATOR``) of a dev cluster and forget it.

    A no-op when it is not recorded (never started, or already stopped).  The dev cluster's own
    ``stop`` ends operators too; this is for tests that need an operator only for a while.
    """
    if name not in (KUBERAY, TRAINING_OPERATOR):
        raise ValueError(f"{name!r} is not an operator process")
    cluster_dir = Path(cluster_dir)
    state = read_state(cluster_dir)
    info = None if state is None else state.get("processes", {}).get(name)
    if state is None or info is None:
        return
    terminate(int(info["pid"]), info.get("start_time"), grace)
    # Forgotten only once ended, so a failed stop leaves it for the cluster's stop() to retry.
    del state["processes"][name]
    write_state(cluster_dir, state)


def _operator_bin_dir(bin_dir: Path | None, binary: str) -> Path:
    """``bin_dir``, or the operators' cache dir, built on first use like the control plane's binaries."""
    bin_dir = build_operators() if bin_dir is None else Path(bin_dir)
    require_binaries(bin_dir, (binary,))
    return bin_dir


@dataclass(frozen=True)
class _Launch:
    """How to start one operator process of a dev cluster."""

    name: str
    argv: Callable[[str, str, int], list[str]]
    """The command line for (metrics address, probe address, a spare port)."""
    env: Mapping[str, str] | None
    while_waiting: Callable[[Any], None] | None
    """Run with an API client between readiness probes, for what the operator needs while it starts."""
    die_with_parent: bool
    timeout: float


def _start(cluster: DevCluster, launch: _Launch) -> OperatorProcess:
    """Start the process (replacing one of that name already running) and wait until it is ready.

    Free ports can be taken before the operator binds them, so an exit that says so is
    retried on new ones, as the control plane's start does.  On any failure the operator is
    stopped before the exception propagates.
    """
    stop_operator(cluster.dir, launch.name)
    attempt = 0
    while True:
        attempt += 1
        try:
            return _launch_and_wait(cluster, launch)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                stop_operator(cluster.dir, launch.name)
            port_taken = isinstance(exc, ExitedDuringStartup) and exc.port_taken
            if not port_taken or attempt == _PORT_ATTEMPTS:
                raise


def _launch_and_wait(cluster: DevCluster, launch: _Launch) -> OperatorProcess:
    """Launch on free ports and wait for its /readyz; `while_waiting`'s errors end the wait at
    once, as the operator exiting does."""
    name = launch.name
    state = read_state(cluster.dir)
    if state is None:
        raise DevClusterError(f"no dev cluster is recorded in {cluster.dir}")
    launcher = Launcher(cluster.dir, state, launch.die_with_parent)
    metrics_port, probe_port, spare_port = free_ports(3)
    readyz_url = f"http://{LOOPBACK}:{probe_port}/readyz"
    pid = launcher.launch(
        name, launch.argv(f"{LOOPBACK}:{metrics_port}", f"{LOOPBACK}:{probe_port}", spare_port), launch.env
    )
    with contextlib.closing(cluster.api_client()) as api:

        def check() -> None:
            launcher.check_alive(name)
            if launch.while_waiting is not None:
                launch.while_waiting(api)

        wait_until(f"{name} {readyz_url}", lambda: _http_ok(readyz_url), launch.timeout, check)
    return OperatorProcess(
        name=name,
        cluster_dir=cluster.dir,
        pid=pid,
        log=cluster.dir / f"{name}.log",
        metrics_url=f"http://{LOOPBACK}:{metrics_port}/metrics",
        readyz_url=readyz_url,
    )


def _clear_webhook_cert() -> None:
    """Remove a certificate an earlier training-operator (maybe another cluster's) left behind.

    The operator would go on with it at once, and its webhook server would then load the stale
    pair while ``_mirror_webhook_cert`` replaces it: a key that does not match its certificate.
    """
    with _webhook_cert_dir():
        for name in _WEBHOOK_CERT_FILES:
            (_WEBHOOK_CERT_DIR / name).unlink(missing_ok=True)


def _mirror_webhook_cert(api: Any) -> None:
    """Copy the webhook Secret's certificate into the directory a pod would mount it at.

    A no-op until the operator's cert rotator has filled the Secret, and for files that already
    hold the same bytes (rewriting them would make the webhook server reload for nothing).
    Each file is written through a temporary file and a rename, so it is never seen half written.
    """
    from kubernetes import client

    secret = client.CoreV1Api(api).read_namespaced_secret(_WEBHOOK_SECRET, TRAINING_OPERATOR_NAMESPACE)
    data = secret.data or {}
    if not all(data.get(name) for name in _WEBHOOK_CERT_FILES):
        return
    with _webhook_cert_dir():
        _WEBHOOK_CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in _WEBHOOK_CERT_FILES:
            content = base64.b64decode(data[name])
            path = _WEBHOOK_CERT_DIR / name
            if path.is_file() and path.read_bytes() == content:
                continue
            tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
            write_private(tmp, content)
            os.replace(tmp, path)


@contextlib.contextmanager
def _webhook_cert_dir() -> Iterator[None]:
    """Turn a failure to use the fixed certificate directory into a ``DevClusterError`` that says why."""
    try:
        yield
    except OSError as exc:
        raise DevClusterError(
            f"cannot use {_WEBHOOK_CERT_DIR} for the training-operator's webhook certificate "
            f"(v1.8.1 reads it only from there): {exc}"
        ) from exc
