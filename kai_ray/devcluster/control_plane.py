"""A throwaway Kubernetes control plane on loopback: etcd + kube-apiserver (+ kwok, + some of
kube-controller-manager's controllers) for tests and demos.

Why this exists: kai-ray's Kubernetes backend must be tested against a *real* kube-apiserver
(the same approach as controller-runtime's envtest and KAI's own env-tests), never a mocked
client, because the behaviour that matters (resourceVersions, watches, 409 conflicts,
admission, status subresources, pods/binding) lives in the server.  The binaries are built
from their published Go modules by ``kai_ray/devcluster/toolchain/build-bins.sh`` into a cache outside the
repository; this module only starts and stops them.

What it starts (everything bound to 127.0.0.1 on free ports, nothing else is dialled):

* etcd (``--unsafe-no-fsync``: test data is disposable, fsync would dominate on CI disks);
* kube-apiserver with a static bearer token in ``system:masters`` (works before RBAC
  bootstrap finishes), the ServiceAccount and TaintNodesByCondition admission plugins off
  (no ServiceAccount controller or node lifecycle controller runs to create ``default``
  ServiceAccounts or lift not-ready taints);
* a pod runner that plays the kubelet for fake nodes: pods bound to them become Running,
  terminating pods are finalized.  That is kwok when it was built, else a small in-repo
  fake kubelet (``python -m kai_ray.devcluster.fake_kubelet KUBECONFIG``);
* kube-controller-manager running only ``CONTROLLERS`` (when its binary was built, see
  ``controller_manager``), so Deployments, ReplicaSets and Jobs get pods, owned objects are
  garbage-collected, namespaces finish deleting and PVCs bind to PVs as on a real cluster.
  Never kube-scheduler: kai-ray is the scheduler under test.

``start`` then installs kai-ray's CRDs (generated from its models in process, so an installed
kai-ray needs no checkout; or the CRD files of a directory), the default objects of a fresh KAI
install (priority classes, ``default-parent-queue``/``default-queue``) and optionally N fake GPU
nodes.  PIDs, ports and the token go to ``DIR/state.json`` so ``stop`` (possibly from another
process, e.g. ``kai-ray devcluster down``) can end exactly what was started.

Credentials: the admin token (``tokens.csv``, ``kubeconfig``, ``state.json``), the
ServiceAccount signing key (``sa.key``) and the serving key (``pki/``) are created readable by
their owner only, because DIR is often under a shared /tmp and the token is cluster-admin.
``stop`` deletes them and the audit log, and keeps the process logs.

``start(audit=True)`` makes the apiserver write an audit log of every mutating request
(``read_audit_events``), so tests can check which identity/user agent changed what.
``service_account_kubeconfig`` gives tests a non-admin identity for checking RBAC.

Not provided: anything of a kubelet beyond kwok's stages, any controller outside
``CONTROLLERS`` (node lifecycle, pod GC, DaemonSet, disruption, ...), and every controller
with ``controller_manager="off"`` (or no kube-controller-manager binary): then namespaces never
finish deleting and nothing acts on ownerReferences, Deployments or Jobs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import secrets
import shutil
import ssl
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from kai_ray.devcluster.audit import AUDIT_LOG, AUDIT_POLICY, prepare_audit
from kai_ray.devcluster.binaries import CONTROLLER_MANAGER, DevClusterError, build_bins, require_binaries
from kai_ray.devcluster.credentials import generate_rsa_key, write_kubeconfig
from kai_ray.devcluster.processes import (
    LOOPBACK,
    STATE_FILE,
    STATE_VERSION,
    ExitedDuringStartup,
    Launcher,
    free_ports,
    read_state,
    remove,
    terminate,
    wait_until,
    write_private,
    write_state,
)
from kai_ray.devcluster.seeding import (
    FAKE_NODE_ANNOTATION,
    crd_documents,
    create_default_objects,
    create_gpu_node,
    generated_crds,
    install_crd_manifests,
    node_ready,
)

# Processes in the order they are stopped (reverse start order): the pod runner first so it
# does not spin on a dying apiserver, etcd last so the apiserver can shut down cleanly.  Any
# other recorded process (the operators of `operators`) is a client started later and goes
# before all of these: while its watches are open the apiserver waits out the whole grace.
_STOP_ORDER = ("pod-runner", "kube-controller-manager", "kube-apiserver", "etcd")

# What stop() deletes besides etcd's data: everything holding a credential (the admin token,
# the controller-manager's token, the ServiceAccount signing key, the serving keys under pki/)
# and the audit log.
_CONTROLLER_MANAGER_KUBECONFIG = "kube-controller-manager.kubeconfig"
_SECRETS = ("tokens.csv", "kubeconfig", _CONTROLLER_MANAGER_KUBECONFIG, "sa.key", "pki", AUDIT_LOG)

_T = TypeVar("_T")
PodRunner = Literal["auto", "kwok", "fake-kubelet", "none"]
ControllerManager = Literal["auto", "on", "off"]
_PORT_ATTEMPTS = 3

#: The kube-controller-manager controllers a dev cluster runs (its ``--controllers``), each
#: because a workload or test needs what it does on a real cluster:
#:
#: * deployment, replicaset, job: Deployments and Jobs get their pods (kwok's stages complete
#:   Job-owned pods, so Jobs finish too); ttl-after-finished deletes finished Jobs that ask for
#:   it (``ttlSecondsAfterFinished``), as KubeRay's and the trainers' Jobs may;
#: * garbage-collector: deleting an owner deletes what it owns (ownerReferences);
#: * namespace: a deleted namespace is emptied and goes away instead of staying Terminating;
#: * persistentvolume-binder: a PVC binds to a matching PV; the two protection controllers
#:   take off the finalizers the apiserver's StorageObjectInUseProtection admission puts on
#:   PVCs and PVs, so they can be deleted.
#:
#: Left out on purpose: the node lifecycle and taint-eviction controllers (kwok owns node
#: status; they would taint and evict kwok's nodes and pods), the pod garbage collector (it
#: deletes pods on nodes it finds gone or not ready), DaemonSet (it would put pods on every
#: fake GPU node), disruption (it writes PodDisruptionBudget status the scheduler's tests set
#: up themselves), the ServiceAccount controllers (the ServiceAccount admission plugin is off,
#: so pods need no ``default`` ServiceAccount or token Secret), and every node IPAM, route,
#: service, certificate and cloud controller.  kube-scheduler never runs: kai-ray schedules.
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "job-controller",
    "ttl-after-finished-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "persistentvolume-binder-controller",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
)
#: The identity the controller manager logs in as: the bootstrap RBAC binds this user to the
#: ``system:kube-controller-manager`` ClusterRole (list/watch everything, create ServiceAccount
#: tokens), and each controller then acts as its own ServiceAccount in kube-system
#: (``--use-service-account-credentials``) with the bootstrap role of that controller, as on a
#: kubeadm cluster.  Not in ``system:masters``, so a controller cannot do what its role forbids.
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"


# --------------------------------------------------------------------------------------------
# The handle returned by start()


@dataclass(frozen=True)
class DevCluster:
    """A running dev control plane; everything a client needs to talk to it."""

    dir: Path
    kubeconfig: Path
    server: str
    token: str
    ca_file: Path
    etcd_url: str
    bin_dir: Path
    pod_runner: str
    nodes: tuple[str, ...] = field(default_factory=tuple)
    gpus_per_node: int = 0
    #: The kube-controller-manager controllers running (``CONTROLLERS``), empty when it does not run.
    controllers: tuple[str, ...] = ()
    #: The apiserver's JSON-lines audit log when started with ``audit=True`` (see ``read_audit_events``).
    audit_log: Path | None = None

    def api_client(self) -> Any:
        """A fresh ``kubernetes.client.ApiClient`` for this cluster (callers close it)."""
        from kubernetes import client

        return client.ApiClient(self.configuration())

    def configuration(self) -> Any:
        """A ``kubernetes.client.Configuration`` with TLS verified against the apiserver's own CA."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.server
        cfg.api_key = {"authorization": self.token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.verify_ssl = True
        return cfg

    def stop(self) -> None:
        """Stop everything this cluster started (same as ``stop(self.dir)``)."""
        stop(self.dir)


# --------------------------------------------------------------------------------------------
# start / stop


def stop(dir: Path, grace: float = 10.0) -> None:
    """Stop every process recorded in ``dir/state.json`` and forget them.

    Safe to call repeatedly, on a directory that never held a cluster, and from a different
    process than the one that called ``start``.  The process logs are kept for post-mortems.
    Removed: etcd's data directory (large and worthless), and every file holding a credential
    plus the audit log, so a stopped cluster leaves no admin token or key behind in a directory
    that may be shared.  When a process cannot be stopped nothing is removed, so state.json
    still lets a later ``stop`` retry.
    """
    dir = Path(dir)
    state = read_state(dir)
    if state is None:
        return
    procs: dict[str, Any] = state.get("processes", {})
    errors: list[str] = []
    names = [n for n in procs if n not in _STOP_ORDER] + [n for n in _STOP_ORDER if n in procs]
    for name in names:
        info = procs[name]
        try:
            terminate(int(info["pid"]), info.get("start_time"), grace)
        except DevClusterError as exc:
            errors.append(f"{name}: {exc}")
    if errors:
        raise DevClusterError("; ".join(errors))
    etcd_data = state.get("etcd_data_dir")
    if etcd_data:
        shutil.rmtree(etcd_data, ignore_errors=True)
    for name in _SECRETS:
        remove(dir / name)
    # Rotated audit logs (the apiserver rotates audit.log at 100 MB to audit-<timestamp>.log).
    for rotated in dir.glob("audit-*.log"):
        rotated.unlink()
    # Last, so an interrupted stop can be repeated.
    with contextlib.suppress(FileNotFoundError):
        (dir / STATE_FILE).unlink()


def start(
    dir: Path,
    nodes: int = 0,
    gpus_per_node: int = 8,
    *,
    bin_dir: Path | None = None,
    crd_dir: Path | None = None,
    pod_runner: PodRunner = "auto",
    queue_quota: float = -1,
    node_prefix: str = "gpu-node-",
    gpu_memory_mib: int = 81920,
    ready_timeout: float = 180.0,
    die_with_parent: bool = False,
    audit: bool = False,
    controller_manager: ControllerManager = "auto",
) -> DevCluster:
    """Start etcd + kube-apiserver (+ pod runner) on loopback and seed a fresh KAI install.

    ``dir`` receives the kubeconfig, logs and state.json.  A cluster already recorded there is
    stopped first, so calling ``start`` twice yields one fresh cluster, never two.  On any
    failure everything started so far is stopped before the exception propagates.

    ``bin_dir`` holds etcd and kube-apiserver (and optionally kwok); without it they are built
    once from the packaged toolchain (``build_bins``).  ``crd_dir`` is a directory of CRD files
    to install instead of kai-ray's own CRDs generated from its models (``generated_crds``).
    Both are checked before a cluster already running in ``dir`` is stopped, so a wrong one
    leaves it alone.

    ``pod_runner`` is ``"kwok"``, ``"fake-kubelet"``, ``"none"`` or ``"auto"`` (kwok when its
    binary is in ``bin_dir``).  ``queue_quota`` is the quota given to both default queues
    (KAI's chart ships ``0``; ``-1`` lets non-preemptible workloads run in tests).
    ``die_with_parent`` makes the kernel kill the children if this Python process dies.
    ``audit`` makes the apiserver log every mutating request to ``DIR/audit.log``
    (``DevCluster.audit_log``, ``read_audit_events``); off by default since it costs a
    synchronous file write per mutation.
    ``controller_manager`` runs kube-controller-manager with ``CONTROLLERS``: ``"on"`` (its
    binary must be in ``bin_dir``), ``"off"``, or ``"auto"`` (the default: on when the binary
    is there, which ``build_bins`` always builds, so a cluster behaves like a real one unless
    a caller that plays those controllers itself says ``"off"``).
    """
    if pod_runner not in ("auto", "kwok", "fake-kubelet", "none"):
        raise ValueError(f"unknown pod_runner {pod_runner!r}")
    if controller_manager not in ("auto", "on", "off"):
        raise ValueError(f"unknown controller_manager {controller_manager!r}")
    crds = generated_crds() if crd_dir is None else crd_documents(Path(crd_dir))
    bin_dir = build_bins() if bin_dir is None else Path(bin_dir)
    require_binaries(bin_dir)
    if controller_manager == "on":
        require_binaries(bin_dir, (CONTROLLER_MANAGER,))
    run_controllers = controller_manager == "on" or (
        controller_manager == "auto" and os.access(bin_dir / CONTROLLER_MANAGER, os.X_OK)
    )
    if pod_runner == "auto":
        pod_runner = "kwok" if os.access(bin_dir / "kwok", os.X_OK) else "fake-kubelet"
    dir = Path(dir).resolve()
    dir.mkdir(parents=True, exist_ok=True)
    stop(dir)

    # Left over when a previous stop() could not run (no state.json); a stale audit log would
    # mix the old cluster's events into the new one's.
    for stale in ("etcd-data", *_SECRETS):
        remove(dir / stale)

    state: dict[str, Any] = {
        "version": STATE_VERSION,
        "processes": {},
        "etcd_data_dir": str(dir / "etcd-data"),
        "bin_dir": str(bin_dir),
    }
    write_state(dir, state)
    launcher = Launcher(dir, state, die_with_parent)
    try:
        for attempt in range(_PORT_ATTEMPTS):
            try:
                cluster = _start(dir, launcher, bin_dir, pod_runner, ready_timeout, audit, run_controllers)
                break
            except ExitedDuringStartup as exc:
                # The free ports we picked can be taken before etcd/apiserver bind them; pick anew.
                if not exc.port_taken or attempt == _PORT_ATTEMPTS - 1:
                    raise
                stop(dir)
                state["processes"] = {}
                write_state(dir, state)
        api = cluster.api_client()
        try:
            install_crd_manifests(api, crds, timeout=ready_timeout)
            create_default_objects(api, queue_quota=queue_quota, timeout=ready_timeout)
            # After the CRDs, so the garbage collector's first discovery already sees them.
            controllers = _launch_controller_manager(cluster, launcher) if run_controllers else ()
            names = tuple(f"{node_prefix}{i}" for i in range(nodes))
            # With a pod runner, nodes start un-Ready and the runner marks them Ready: waiting
            # for that proves the runner is up and managing them before tests bind pods.
            runner = pod_runner != "none"
            for name in names:
                create_gpu_node(
                    api, name, gpus=gpus_per_node, gpu_memory_mib=gpu_memory_mib, ready=not runner
                )
            if runner:
                for name in names:
                    wait_until(
                        f"node {name} Ready (set by {pod_runner})",
                        functools.partial(node_ready, api, name),
                        ready_timeout,
                        lambda: launcher.check_alive("pod-runner"),
                    )
                launcher.check_alive("pod-runner")
            if controllers:
                _wait_controller_manager_healthy(cluster, launcher, ready_timeout)
        finally:
            api.close()
        cluster = dataclasses.replace(
            cluster, nodes=names, gpus_per_node=gpus_per_node, controllers=controllers
        )
        state["nodes"] = list(names)
        state["controllers"] = list(controllers)
        write_state(dir, state)
        return cluster
    except BaseException:
        with contextlib.suppress(Exception):
            stop(dir)
        raise


def _start(
    dir: Path,
    launcher: Launcher,
    bin_dir: Path,
    pod_runner: str,
    timeout: float,
    audit: bool,
    controllers: bool,
) -> DevCluster:
    etcd_port, peer_port, api_port = free_ports(3)
    etcd_url = f"http://{LOOPBACK}:{etcd_port}"
    peer_url = f"http://{LOOPBACK}:{peer_port}"
    launcher.launch(
        "etcd",
        [
            str(bin_dir / "etcd"),
            "--name=devcluster",
            f"--data-dir={dir / 'etcd-data'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=devcluster={peer_url}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
    )
    launcher.state["ports"] = {"etcd": etcd_port, "etcd-peer": peer_port, "kube-apiserver": api_port}
    write_state(dir, launcher.state)
    wait_until(
        f"etcd on {etcd_url}",
        lambda: _http_ok(f"{etcd_url}/health"),
        timeout,
        lambda: launcher.check_alive("etcd"),
    )

    token = secrets.token_hex(16)
    # The apiserver reads its token file once, at start-up: the controller manager's token goes
    # in now although the controller manager starts only after the CRDs are installed.
    cm_token = secrets.token_hex(16) if controllers else None
    tokens = f"{token},admin,admin,system:masters\n"
    if cm_token is not None:
        tokens += f"{cm_token},{CONTROLLER_MANAGER_USER},{CONTROLLER_MANAGER_USER}\n"
    write_private(dir / "tokens.csv", tokens)
    generate_rsa_key(dir / "sa.key")
    # The apiserver writes its self-signed serving key here; it creates --cert-dir 0755 but
    # leaves an existing directory's mode alone, so creating it first keeps the key private.
    (dir / "pki").mkdir(mode=0o700, exist_ok=True)
    audit_log = prepare_audit(dir) if audit else None
    server = f"https://{LOOPBACK}:{api_port}"
    launcher.launch("kube-apiserver", _apiserver_argv(bin_dir, dir, etcd_url, api_port, server, audit_log))
    launcher.state["server"] = server
    launcher.state["token"] = token
    launcher.state["audit_log"] = None if audit_log is None else str(audit_log)
    write_state(dir, launcher.state)
    wait_until(
        f"kube-apiserver /readyz on {server}",
        lambda: _http_ok(f"{server}/readyz", token=token),
        timeout,
        lambda: launcher.check_alive("kube-apiserver"),
    )
    ca_file = dir / "pki" / "apiserver.crt"
    kubeconfig = dir / "kubeconfig"
    write_kubeconfig(kubeconfig, server, token, ca_file)
    if cm_token is not None:
        write_kubeconfig(
            dir / _CONTROLLER_MANAGER_KUBECONFIG, server, cm_token, ca_file, user=CONTROLLER_MANAGER_USER
        )

    if pod_runner == "kwok":
        launcher.launch("pod-runner", _kwok_argv(bin_dir, kubeconfig))
    elif pod_runner == "fake-kubelet":
        # The same interpreter, so it imports the same kai_ray (installed, or editable from a checkout).
        argv = [sys.executable, "-m", "kai_ray.devcluster.fake_kubelet", str(kubeconfig)]
        launcher.launch("pod-runner", argv)
    launcher.state["pod_runner"] = pod_runner
    write_state(dir, launcher.state)
    return DevCluster(
        dir=dir,
        kubeconfig=kubeconfig,
        server=server,
        token=token,
        ca_file=ca_file,
        etcd_url=etcd_url,
        bin_dir=bin_dir,
        pod_runner=pod_runner,
        audit_log=audit_log,
    )


def _apiserver_argv(
    bin_dir: Path, dir: Path, etcd_url: str, port: int, server: str, audit_log: Path | None
) -> list[str]:
    """kube-apiserver flags; kept in one place because they drift between Kubernetes minors."""
    audit_flags = (
        []
        if audit_log is None
        else [
            f"--audit-policy-file={dir / AUDIT_POLICY}",
            f"--audit-log-path={audit_log}",
            "--audit-log-format=json",
            # The event is written before the response is sent: tests can read it right away.
            "--audit-log-mode=blocking",
        ]
    )
    return [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers={etcd_url}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--cert-dir={dir / 'pki'}",
        f"--token-auth-file={dir / 'tokens.csv'}",
        "--authorization-mode=RBAC",
        f"--service-account-issuer={server}",
        f"--service-account-key-file={dir / 'sa.key'}",
        f"--service-account-signing-key-file={dir / 'sa.key'}",
        "--service-cluster-ip-range=10.0.0.0/24",
        # No controller-manager: nobody creates the `default` ServiceAccount or lifts the
        # not-ready taint, so these two admission plugins would block every pod/node.
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
        # Keeps the apiserver from publishing a host IP in the `kubernetes` Endpoints.
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        "--profiling=false",
        *audit_flags,
    ]


def _launch_controller_manager(cluster: DevCluster, launcher: Launcher) -> tuple[str, ...]:
    """Start kube-controller-manager with ``CONTROLLERS`` under an identity of its own.

    Its token and kubeconfig were written by ``_start`` (the apiserver reads its token file
    only at start-up).  Returns the controllers it runs.
    """
    kubeconfig = cluster.dir / _CONTROLLER_MANAGER_KUBECONFIG
    (port,) = free_ports(1)
    launcher.launch("kube-controller-manager", _controller_manager_argv(cluster, kubeconfig, port))
    launcher.state["ports"]["kube-controller-manager"] = port
    write_state(cluster.dir, launcher.state)
    return CONTROLLERS


def _wait_controller_manager_healthy(cluster: DevCluster, launcher: Launcher, timeout: float) -> None:
    """Wait for kube-controller-manager's /healthz (it answers once its controllers started).

    Waited on only after the nodes are Ready, so its start-up overlaps theirs; relaunched on a
    new port when the one picked was taken meanwhile, as ``start`` does for the apiserver.
    """
    for attempt in range(_PORT_ATTEMPTS):
        port = launcher.state["ports"]["kube-controller-manager"]
        log = launcher.state["processes"]["kube-controller-manager"]["log"]
        try:
            wait_until(
                f"kube-controller-manager /healthz on port {port} (log: {log})",
                functools.partial(_http_ok, f"https://{LOOPBACK}:{port}/healthz"),
                timeout,
                lambda: launcher.check_alive("kube-controller-manager"),
            )
            return
        except ExitedDuringStartup as exc:
            if not exc.port_taken or attempt == _PORT_ATTEMPTS - 1:
                raise
            _launch_controller_manager(cluster, launcher)


def _controller_manager_argv(cluster: DevCluster, kubeconfig: Path, port: int) -> list[str]:
    """kube-controller-manager flags; kept in one place like ``_apiserver_argv``."""
    return [
        str(cluster.bin_dir / CONTROLLER_MANAGER),
        f"--kubeconfig={kubeconfig}",
        f"--controllers={','.join(CONTROLLERS)}",
        # One instance per cluster: nothing to elect, and no Lease to wait for at start-up.
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={port}",
        # Its self-signed serving key, beside the apiserver's (the default is /var/run/kubernetes).
        f"--cert-dir={cluster.dir / 'pki'}",
        # /healthz is in the default --authorization-always-allow-paths: no credential needed to probe it.
        "--profiling=false",
    ]


def _kwok_argv(bin_dir: Path, kubeconfig: Path) -> list[str]:
    key, value = FAKE_NODE_ANNOTATION
    return [
        str(bin_dir / "kwok"),
        f"--kubeconfig={kubeconfig}",
        f"--config={bin_dir / 'kwok-stages.yaml'}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={key}={value}",
        "--node-lease-duration-seconds=40",
        "--cidr=10.0.0.0/16",
    ]


def _http_ok(url: str, token: str | None = None) -> bool | None:
    """True when ``url`` answers 200 (TLS unverified: used before the serving cert is trusted)."""
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:
            return True if resp.status == 200 else None
    except (urllib.error.URLError, OSError):
        return None
