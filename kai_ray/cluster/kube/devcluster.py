"""A throwaway Kubernetes control plane on loopback: etcd + kube-apiserver (+ kwok) for tests and demos.

Why this exists: kai-ray's Kubernetes backend must be tested against a *real* kube-apiserver
(the same approach as controller-runtime's envtest and KAI's own env-tests), never a mocked
client, because the behaviour that matters (resourceVersions, watches, 409 conflicts,
admission, status subresources, pods/binding) lives in the server.  The binaries are built
from their published Go modules by ``tools/k8s/build-bins.sh`` into a cache outside the
repository; this module only starts and stops them.

What it starts (everything bound to 127.0.0.1 on free ports, nothing else is dialled):

* etcd (``--unsafe-no-fsync``: test data is disposable, fsync would dominate on CI disks);
* kube-apiserver with a static bearer token in ``system:masters`` (works before RBAC
  bootstrap finishes), the ServiceAccount and TaintNodesByCondition admission plugins off
  (no controller-manager runs to create ServiceAccounts or lift not-ready taints);
* a pod runner that plays the kubelet for fake nodes: pods bound to them become Running,
  terminating pods are finalized.  That is kwok when it was built, else a small in-repo
  fake kubelet (``python -m kai_ray.cluster.kube.devcluster fake-kubelet``).

``start`` then installs the CRDs, the default objects of a fresh KAI install (priority
classes, ``default-parent-queue``/``default-queue``) and optionally N fake GPU nodes.  PIDs,
ports and the token go to ``DIR/state.json`` so ``stop`` (possibly from another process, e.g.
``kai-ray devcluster down``) can end exactly what was started.

Credentials: the admin token (``tokens.csv``, ``kubeconfig``, ``state.json``), the
ServiceAccount signing key (``sa.key``) and the serving key (``pki/``) are created readable by
their owner only, because DIR is often under a shared /tmp and the token is cluster-admin.
``stop`` deletes them and the audit log, and keeps the process logs.

``start(audit=True)`` makes the apiserver write an audit log of every mutating request
(``read_audit_events``), so tests can check which identity/user agent changed what.
``service_account_kubeconfig`` gives tests a non-admin identity for checking RBAC.

Not provided (no kube-controller-manager runs): namespace deletion finishing, garbage
collection of ownerReferences, Job/ReplicaSet controllers.  Tests use unique namespaces and
delete pods with ``grace_period_seconds=0``.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import yaml

__all__ = [
    "DEFAULT_PRIORITY_CLASSES",
    "FAKE_NODE_ANNOTATION",
    "DevCluster",
    "DevClusterError",
    "PodRunner",
    "build_bins",
    "create_default_objects",
    "create_gpu_node",
    "default_crd_dir",
    "install_crds",
    "read_audit_events",
    "repo_root",
    "run_fake_kubelet",
    "service_account_kubeconfig",
    "start",
    "stop",
]

STATE_FILE = "state.json"
STATE_VERSION = 1
LOOPBACK = "127.0.0.1"

#: Annotation that hands a Node to the pod runner (kwok's ``--manage-nodes-with-annotation-selector``).
FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")

#: PriorityClasses a fresh KAI install creates (helm ``defaultPriorityClasses``); <100 is preemptible.
DEFAULT_PRIORITY_CLASSES: Mapping[str, int] = {
    "train": 50,
    "build-preemptible": 75,
    "build": 100,
    "inference": 125,
}

QUEUE_GROUP = "scheduling.run.ai"
QUEUE_VERSION = "v2"
QUEUE_PLURAL = "queues"
DEFAULT_PARENT_QUEUE = "default-parent-queue"
DEFAULT_QUEUE = "default-queue"

# Processes in the order they are stopped (reverse start order): the pod runner first so it
# does not spin on a dying apiserver, etcd last so the apiserver can shut down cleanly.
_STOP_ORDER = ("pod-runner", "kube-apiserver", "etcd")

AUDIT_LOG = "audit.log"
AUDIT_POLICY = "audit-policy.yaml"
#: Verbs the audit policy records; reads (get/list/watch) are left out to keep the log small.
AUDITED_VERBS = ("create", "update", "patch", "delete", "deletecollection")

# What stop() deletes besides etcd's data: everything holding a credential (the admin token,
# the ServiceAccount signing key, the serving key under pki/) and the audit log.
_SECRETS = ("tokens.csv", "kubeconfig", "sa.key", "pki", AUDIT_LOG)

_T = TypeVar("_T")
PodRunner = Literal["auto", "kwok", "fake-kubelet", "none"]
_PORT_ATTEMPTS = 3


class DevClusterError(RuntimeError):
    """The dev control plane could not be built, started or reached."""


# --------------------------------------------------------------------------------------------
# Locations


def repo_root() -> Path:
    """The kai-ray checkout this module lives in (``tools/`` and ``charts/`` are found from it).

    Resolved from this file rather than the working directory so tests and the CLI behave the
    same wherever they are launched from.
    """
    return Path(__file__).resolve().parents[3]


def default_crd_dir(root: Path | None = None) -> Path:
    """kai-ray's own generated CRDs when present, else the upstream KAI CRDs next to the repo.

    Preferring ``charts/kai-ray/crds`` means tests exercise the CRDs we ship; the upstream
    copy (``../shared/crds/kai``) keeps the dev cluster usable before those are generated.
    """
    root = repo_root() if root is None else root
    ours = root / "charts" / "kai-ray" / "crds"
    if ours.is_dir() and any(ours.glob("*.yaml")):
        return ours
    return (root.parent / "shared" / "crds" / "kai").resolve()


def build_bins(root: Path | None = None, timeout: float = 3600.0) -> Path:
    """Build (first time only) or locate kube-apiserver/etcd/kwok and return their directory.

    ``KAI_RAY_K8S_BIN_DIR`` short-circuits the build for machines that already have binaries.
    The build script prints the bin dir as its last stdout line; its progress goes to stderr,
    which is passed through so a 10+ minute cold build is visibly alive.
    """
    env_dir = os.environ.get("KAI_RAY_K8S_BIN_DIR")
    if env_dir:
        path = Path(env_dir)
        _require_binaries(path)
        return path
    root = repo_root() if root is None else root
    script = root / "tools" / "k8s" / "build-bins.sh"
    if not script.is_file():
        raise DevClusterError(f"{script} not found; set KAI_RAY_K8S_BIN_DIR to a directory with the binaries")
    proc = subprocess.run(
        ["bash", str(script)], stdout=subprocess.PIPE, stderr=None, text=True, timeout=timeout, check=False
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        raise DevClusterError(f"{script} failed with exit code {proc.returncode}")
    path = Path(lines[-1].strip())
    _require_binaries(path)
    return path


def _require_binaries(bin_dir: Path) -> None:
    for name in ("etcd", "kube-apiserver"):
        if not os.access(bin_dir / name, os.X_OK):
            raise DevClusterError(f"{bin_dir / name} is missing or not executable")


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
# Process bookkeeping


def _proc_start_time(pid: int) -> int | None:
    """Kernel start time of ``pid`` (clock ticks since boot), to detect PID reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses; fields after the last ')' are fixed.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])  # field 22 overall


def _reap(pid: int) -> bool | None:
    """Collect ``pid``'s exit status if it is our exited child.

    Returns True when reaped, False when it is our child but has not fully exited yet, None
    when it is not our child (started by another process, or already reaped).  Reaping
    matters: an ended child otherwise stays a zombie until the starting process exits.
    """
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return reaped == pid


def _alive(pid: int, start_time: int | None) -> bool:
    """True while ``pid`` is the very process we started (not exited, not a reused PID)."""
    now = _proc_start_time(pid)
    if start_time is not None and now is not None and now != start_time:
        return False  # the PID now belongs to an unrelated process; ours is long gone
    reaped = _reap(pid)
    if reaped:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        if Path("/proc/self/stat").exists():
            return False  # /proc works, so the process is gone
        # No /proc on this system: fall back to a signal-0 probe.
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    if stat[stat.rindex(")") + 2] == "Z":
        # A Go program's main thread shows "Z" while its other threads are still exiting, and
        # waitpid cannot collect it yet: for our own child, keep waiting until it is reaped.
        return _reap(pid) is False
    return True


def _terminate(pid: int, start_time: int | None, grace: float) -> None:
    """SIGTERM the process group led by ``pid``, SIGKILL it after ``grace`` seconds."""
    if not _alive(pid, start_time):
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            # Each child leads its own session/process group, so this also reaches helpers it forked.
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _alive(pid, start_time):
                return
            time.sleep(0.05)
    raise DevClusterError(f"process {pid} survived SIGKILL")


def _read_state(dir: Path) -> dict[str, Any] | None:
    path = dir / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_state(dir: Path, state: Mapping[str, Any]) -> None:
    """Atomically replace state.json so a concurrent ``stop`` never reads half a file."""
    tmp = dir / (STATE_FILE + ".tmp")
    _write_private(tmp, json.dumps(state, indent=2, sort_keys=True))  # it holds the admin token
    os.replace(tmp, dir / STATE_FILE)


def _write_private(path: Path, data: str | bytes) -> None:
    """Create ``path`` with mode 0600 from its first byte, for files holding credentials.

    Writing first and chmod-ing afterwards would leave the secret world-readable (umask 022)
    for a moment.  An existing file is removed first because ``O_CREAT`` keeps an existing
    file's mode; ``O_EXCL`` also refuses to write through a symlink planted at ``path``.
    """
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data.encode() if isinstance(data, str) else data)


def _remove(path: Path) -> None:
    """Delete a file or directory tree if it exists."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """preexec_fn: have the kernel SIGKILL the child when the starting process dies.

    Used by the pytest fixture so a killed test run leaves no etcd/apiserver behind.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class _Launcher:
    """Starts processes and records each one in state.json *before* waiting on it."""

    def __init__(self, dir: Path, state: dict[str, Any], die_with_parent: bool) -> None:
        self.dir = dir
        self.state = state
        self.die_with_parent = die_with_parent

    def launch(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
        log = self.dir / f"{name}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                env=None if env is None else dict(env),
                start_new_session=True,
                preexec_fn=_die_with_parent if self.die_with_parent else None,
            )
        self.state["processes"][name] = {
            "pid": proc.pid,
            "start_time": _proc_start_time(proc.pid),
            "argv": list(argv),
            "log": str(log),
        }
        _write_state(self.dir, self.state)
        return proc.pid

    def check_alive(self, name: str) -> None:
        info = self.state["processes"][name]
        if not _alive(int(info["pid"]), info.get("start_time")):
            raise DevClusterError(f"{name} exited during start-up:\n{_tail(Path(info['log']))}")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _free_ports(count: int) -> list[int]:
    """Distinct free loopback ports; held open together so they are not handed out twice."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _wait_until(
    what: str, probe: Callable[[], _T | None], timeout: float, check: Callable[[], None] | None = None
) -> _T:
    """Poll ``probe`` until it returns a non-None value or ``timeout`` elapses.

    ``check`` runs between probes to fail fast (e.g. the process being waited on died)
    instead of waiting out the whole timeout.
    """
    deadline = time.monotonic() + timeout
    delay = 0.05
    last_error: BaseException | None = None
    while True:
        if check is not None:
            check()
        try:
            result = probe()
        except Exception as exc:  # the probe's failures are expected until the thing is up
            last_error = exc
            result = None
        if result is not None:
            return result
        if time.monotonic() >= deadline:
            raise DevClusterError(
                f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error})"
            )
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


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
    state = _read_state(dir)
    if state is None:
        return
    procs: dict[str, Any] = state.get("processes", {})
    errors: list[str] = []
    names = [n for n in _STOP_ORDER if n in procs] + [n for n in procs if n not in _STOP_ORDER]
    for name in names:
        info = procs[name]
        try:
            _terminate(int(info["pid"]), info.get("start_time"), grace)
        except DevClusterError as exc:
            errors.append(f"{name}: {exc}")
    if errors:
        raise DevClusterError("; ".join(errors))
    etcd_data = state.get("etcd_data_dir")
    if etcd_data:
        shutil.rmtree(etcd_data, ignore_errors=True)
    for name in _SECRETS:
        _remove(dir / name)
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
) -> DevCluster:
    """Start etcd + kube-apiserver (+ pod runner) on loopback and seed a fresh KAI install.

    ``dir`` receives the kubeconfig, logs and state.json.  A cluster already recorded there is
    stopped first, so calling ``start`` twice yields one fresh cluster, never two.  On any
    failure everything started so far is stopped before the exception propagates.

    ``pod_runner`` is ``"kwok"``, ``"fake-kubelet"``, ``"none"`` or ``"auto"`` (kwok when its
    binary is in ``bin_dir``).  ``queue_quota`` is the quota given to both default queues
    (KAI's chart ships ``0``; ``-1`` lets non-preemptible workloads run in tests).
    ``die_with_parent`` makes the kernel kill the children if this Python process dies.
    ``audit`` makes the apiserver log every mutating request to ``DIR/audit.log``
    (``DevCluster.audit_log``, ``read_audit_events``); off by default since it costs a
    synchronous file write per mutation.
    """
    dir = Path(dir).resolve()
    dir.mkdir(parents=True, exist_ok=True)
    stop(dir)
    bin_dir = build_bins() if bin_dir is None else Path(bin_dir)
    _require_binaries(bin_dir)
    crd_dir = default_crd_dir() if crd_dir is None else Path(crd_dir)
    if pod_runner == "auto":
        pod_runner = "kwok" if os.access(bin_dir / "kwok", os.X_OK) else "fake-kubelet"
    if pod_runner not in ("kwok", "fake-kubelet", "none"):
        raise ValueError(f"unknown pod_runner {pod_runner!r}")

    # Left over when a previous stop() could not run (no state.json); a stale audit log would
    # mix the old cluster's events into the new one's.
    for stale in ("etcd-data", *_SECRETS):
        _remove(dir / stale)

    state: dict[str, Any] = {
        "version": STATE_VERSION,
        "processes": {},
        "etcd_data_dir": str(dir / "etcd-data"),
        "bin_dir": str(bin_dir),
    }
    _write_state(dir, state)
    launcher = _Launcher(dir, state, die_with_parent)
    try:
        for attempt in range(_PORT_ATTEMPTS):
            try:
                cluster = _start(dir, launcher, bin_dir, pod_runner, ready_timeout, audit)
                break
            except DevClusterError as exc:
                # The free ports we picked can be taken before etcd/apiserver bind them; pick anew.
                if "address already in use" not in str(exc) or attempt == _PORT_ATTEMPTS - 1:
                    raise
                stop(dir)
                state["processes"] = {}
                _write_state(dir, state)
        api = cluster.api_client()
        try:
            install_crds(api, crd_dir, timeout=ready_timeout)
            create_default_objects(api, queue_quota=queue_quota, timeout=ready_timeout)
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
                    _wait_until(
                        f"node {name} Ready (set by {pod_runner})",
                        functools.partial(_node_ready, api, name),
                        ready_timeout,
                        lambda: launcher.check_alive("pod-runner"),
                    )
                launcher.check_alive("pod-runner")
        finally:
            api.close()
        cluster = dataclasses.replace(cluster, nodes=names, gpus_per_node=gpus_per_node)
        state["nodes"] = list(names)
        _write_state(dir, state)
        return cluster
    except BaseException:
        with contextlib.suppress(Exception):
            stop(dir)
        raise


def _start(
    dir: Path, launcher: _Launcher, bin_dir: Path, pod_runner: str, timeout: float, audit: bool
) -> DevCluster:
    etcd_port, peer_port, api_port = _free_ports(3)
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
    _write_state(dir, launcher.state)
    _wait_until(
        f"etcd on {etcd_url}",
        lambda: _http_ok(f"{etcd_url}/health"),
        timeout,
        lambda: launcher.check_alive("etcd"),
    )

    token = secrets.token_hex(16)
    _write_private(dir / "tokens.csv", f"{token},admin,admin,system:masters\n")
    _generate_rsa_key(dir / "sa.key")
    # The apiserver writes its self-signed serving key here; it creates --cert-dir 0755 but
    # leaves an existing directory's mode alone, so creating it first keeps the key private.
    (dir / "pki").mkdir(mode=0o700, exist_ok=True)
    audit_log = _prepare_audit(dir) if audit else None
    server = f"https://{LOOPBACK}:{api_port}"
    launcher.launch("kube-apiserver", _apiserver_argv(bin_dir, dir, etcd_url, api_port, server, audit_log))
    launcher.state["server"] = server
    launcher.state["token"] = token
    launcher.state["audit_log"] = None if audit_log is None else str(audit_log)
    _write_state(dir, launcher.state)
    _wait_until(
        f"kube-apiserver /readyz on {server}",
        lambda: _http_ok(f"{server}/readyz", token=token),
        timeout,
        lambda: launcher.check_alive("kube-apiserver"),
    )
    ca_file = dir / "pki" / "apiserver.crt"
    kubeconfig = dir / "kubeconfig"
    _write_kubeconfig(kubeconfig, server, token, ca_file)

    if pod_runner == "kwok":
        launcher.launch("pod-runner", _kwok_argv(bin_dir, kubeconfig))
    elif pod_runner == "fake-kubelet":
        pythonpath = os.environ.get("PYTHONPATH", "")
        launcher.launch(
            "pod-runner",
            [sys.executable, "-m", "kai_ray.cluster.kube.devcluster", "fake-kubelet", str(kubeconfig)],
            # Importable from a plain checkout too, not only from an installed kai-ray.
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo_root()), pythonpath]))},
        )
    launcher.state["pod_runner"] = pod_runner
    _write_state(dir, launcher.state)
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


def _prepare_audit(dir: Path) -> Path:
    """Write the audit policy and create the (empty, private) audit log; returns the log's path.

    The policy records mutations at ``Metadata`` level (who, user agent, verb, object, response
    code; no bodies, so no Secret data) and nothing else.  ``RequestReceived`` is omitted so
    each request is one line, written once the response code is known.  The log is created
    here, mode 0600, because it names every identity that changed something; the apiserver
    appends to it, and its rotation keeps the mode.
    """
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "verbs": list(AUDITED_VERBS)}, {"level": "None"}],
    }
    (dir / AUDIT_POLICY).write_text(yaml.safe_dump(policy, sort_keys=False))
    log = dir / AUDIT_LOG
    _write_private(log, b"")
    return log


def read_audit_events(cluster: DevCluster) -> list[dict[str, Any]]:
    """The audit events logged so far, oldest first (one ``audit.k8s.io/v1`` Event per dict).

    The apiserver logs in blocking mode, so a request's event is on disk once the request has
    returned; a line still being appended (no newline yet) is skipped rather than misparsed.
    """
    if cluster.audit_log is None:
        raise DevClusterError(f"the cluster in {cluster.dir} was started without audit=True")
    lines = cluster.audit_log.read_bytes().split(b"\n")[:-1]  # the last piece is unterminated
    return [json.loads(line) for line in lines if line.strip()]


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


def _generate_rsa_key(path: Path) -> None:
    """ServiceAccount signing key (one PEM file is both the public and the private key).

    openssl prints it and we write it, so the file is private from creation whatever
    openssl's own file-mode handling is.
    """
    openssl = shutil.which("openssl")
    if openssl is None:
        raise DevClusterError("openssl is needed to generate the service-account key")
    key = subprocess.run([openssl, "genrsa", "2048"], check=True, capture_output=True).stdout
    _write_private(path, key)


def _write_kubeconfig(path: Path, server: str, token: str, ca_file: Path, user: str = "admin") -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "devcluster", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": user}}],
        "current-context": "devcluster",
    }
    _write_private(path, yaml.safe_dump(config, sort_keys=False))


def service_account_kubeconfig(cluster: DevCluster, api: Any, namespace: str, name: str, path: Path) -> Path:
    """Create ServiceAccount ``namespace/name`` and write a kubeconfig (mode 0600) that acts as it.

    For tests of RBAC: the admin token is in ``system:masters`` and bypasses authorization, a
    ServiceAccount starts with no permissions beyond discovery.  The ServiceAccount is created
    explicitly because no controller-manager runs here; the token comes from the TokenRequest
    API (valid one hour, signed with ``sa.key``), as kubelets obtain them.  ``api`` is an
    admin ``ApiClient``; ``namespace`` must exist.  Returns ``path``.
    """
    from kubernetes import client

    core = client.CoreV1Api(api)
    account = client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
    _create_ignoring_conflict(functools.partial(core.create_namespaced_service_account, namespace, account))
    # No audiences: the token is for the apiserver itself (its default audience, the issuer).
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    status = core.create_namespaced_service_account_token(name, namespace, request).status
    if status is None or not status.token:
        raise DevClusterError(f"TokenRequest for ServiceAccount {namespace}/{name} returned no token")
    path = Path(path)
    _write_kubeconfig(
        path, cluster.server, status.token, cluster.ca_file, user=f"system:serviceaccount:{namespace}:{name}"
    )
    return path


# --------------------------------------------------------------------------------------------
# Seeding objects


def _is_status(exc: BaseException, *codes: int) -> bool:
    return getattr(exc, "status", None) in codes


def _create_ignoring_conflict(create: Callable[[], object]) -> None:
    """Create an object, treating 409 AlreadyExists as success so seeding is idempotent."""
    from kubernetes.client.exceptions import ApiException

    try:
        create()
    except ApiException as exc:
        if not _is_status(exc, 409):
            raise


def _load_yaml_documents(crd_dir: Path) -> Iterator[dict[str, Any]]:
    for path in sorted(crd_dir.glob("*.yaml")) + sorted(crd_dir.glob("*.yml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                yield doc


def install_crds(api: Any, crd_dir: Path, timeout: float = 60.0) -> list[str]:
    """Create every CRD in ``crd_dir`` and wait until each reports ``Established``.

    Waiting matters: creating a custom object before the CRD is established fails with 404.
    """
    from kubernetes import client

    ext: Any = client.ApiextensionsV1Api(api)  # typed for model objects; a plain dict body is fine
    names: list[str] = []
    for doc in _load_yaml_documents(Path(crd_dir)):
        _create_ignoring_conflict(functools.partial(ext.create_custom_resource_definition, body=doc))
        names.append(str(doc["metadata"]["name"]))
    if not names:
        raise DevClusterError(f"no CustomResourceDefinitions found in {crd_dir}")

    def established(name: str) -> bool | None:
        crd = ext.read_custom_resource_definition(name)
        conditions = (crd.status.conditions if crd.status else None) or []
        return True if any(c.type == "Established" and c.status == "True" for c in conditions) else None

    for name in names:
        _wait_until(f"CRD {name} Established", functools.partial(established, name), timeout)
    return names


def create_default_objects(api: Any, queue_quota: float = -1, timeout: float = 60.0) -> None:
    """The objects a fresh KAI install has: its four PriorityClasses and the two default queues."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    sched = client.SchedulingV1Api(api)
    for name, value in DEFAULT_PRIORITY_CLASSES.items():
        priority_class = client.V1PriorityClass(
            metadata=client.V1ObjectMeta(name=name),
            value=value,
            global_default=False,
            description=f"KAI default priority class ({'preemptible' if value < 100 else 'non-preemptible'})",
        )
        _create_ignoring_conflict(functools.partial(sched.create_priority_class, priority_class))

    custom = client.CustomObjectsApi(api)
    quota = {"quota": queue_quota, "limit": -1, "overQuotaWeight": 1}
    resources = {"cpu": dict(quota), "gpu": dict(quota), "memory": dict(quota)}
    queues: list[dict[str, Any]] = [
        {"metadata": {"name": DEFAULT_PARENT_QUEUE}, "spec": {"resources": resources}},
        {
            "metadata": {"name": DEFAULT_QUEUE},
            "spec": {"parentQueue": DEFAULT_PARENT_QUEUE, "resources": resources},
        },
    ]

    def create(body: dict[str, Any]) -> bool | None:
        # A just-Established CRD can still 404 for a moment while its handler is wired up.
        try:
            _create_ignoring_conflict(
                functools.partial(
                    custom.create_cluster_custom_object, QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, body
                )
            )
        except ApiException as exc:
            if _is_status(exc, 404):
                return None
            raise
        return True

    for queue in queues:
        body = {"apiVersion": f"{QUEUE_GROUP}/{QUEUE_VERSION}", "kind": "Queue", **queue}
        _wait_until(f"queue {queue['metadata']['name']} created", functools.partial(create, body), timeout)


def create_gpu_node(
    api: Any,
    name: str,
    gpus: int = 8,
    *,
    gpu_memory_mib: int = 81920,
    gpu_product: str = "NVIDIA-H100-80GB-HBM3",
    cpu: str = "128",
    memory: str = "1Ti",
    pods: int = 256,
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
) -> Any:
    """Create a fake GPU Node (status included) managed by the pod runner; returns the V1Node.

    The Node carries what GPU-Operator/kubelet would publish and KAI reads: allocatable
    ``nvidia.com/gpu`` and the ``nvidia.com/gpu.memory``/``gpu.count``/``gpu.product`` labels.
    It is untainted, because no node-lifecycle controller runs here.  ``ready=False`` leaves
    the Ready condition to the pod runner (kwok's node-initialize stage or the fake kubelet).
    """
    from kubernetes import client

    resources = {"cpu": cpu, "memory": memory, "pods": str(pods), "nvidia.com/gpu": str(gpus)}
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        "nvidia.com/gpu.present": "true" if gpus else "false",
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": str(gpu_memory_mib),
        "nvidia.com/gpu.product": gpu_product,
        **(labels or {}),
    }
    key, value = FAKE_NODE_ANNOTATION
    body = client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels=node_labels, annotations={key: value}),
        spec=client.V1NodeSpec(),
        status=client.V1NodeStatus(
            allocatable=resources,
            capacity=resources,
            phase="Running" if ready else "Pending",
            conditions=[
                client.V1NodeCondition(
                    type="Ready", status="True", reason="KubeletReady", message="fake node"
                ),
            ]
            if ready
            else None,
        ),
    )
    return client.CoreV1Api(api).create_node(body)


def _node_ready(api: Any, name: str) -> bool | None:
    from kubernetes import client

    node = client.CoreV1Api(api).read_node(name)
    conditions = (node.status.conditions if node.status else None) or []
    return True if any(c.type == "Ready" and c.status == "True" for c in conditions) else None


# --------------------------------------------------------------------------------------------
# Fake kubelet (fallback pod runner when kwok is unavailable)


def run_fake_kubelet(
    kubeconfig: Path,
    stop_event: threading.Event | None = None,
    node_annotation: tuple[str, str] = FAKE_NODE_ANNOTATION,
) -> None:
    """Play the kubelet for fake nodes until ``stop_event`` is set (or forever).

    Nodes carrying ``node_annotation`` are marked Ready; pods bound to them get status
    Running/Ready; pods on them that are being deleted are removed with grace 0, as a kubelet
    would once the containers stopped.  It list+watches pods with resourceVersion and re-lists
    on 410 Gone or any error, so an apiserver hiccup only delays it.
    """
    from kubernetes import client, config, watch

    # The client's loader and watch helpers are untyped; objects are handled as Any below.
    api: Any = cast(Any, config).new_client_from_config(config_file=str(kubeconfig))
    core: Any = client.CoreV1Api(api)
    fake_nodes: set[str] = set()

    def refresh_nodes() -> None:
        key, value = node_annotation
        current: set[str] = set()
        for node in core.list_node().items:
            if (node.metadata.annotations or {}).get(key) != value:
                continue
            current.add(node.metadata.name)
            conditions = (node.status.conditions if node.status else None) or []
            if not any(c.type == "Ready" and c.status == "True" for c in conditions):
                _ignore_gone(
                    functools.partial(core.patch_node_status, node.metadata.name, _ready_node_status())
                )
        fake_nodes.clear()
        fake_nodes.update(current)

    def handle(pod: Any) -> None:
        node = pod.spec.node_name
        if not node:
            return
        if node not in fake_nodes:
            refresh_nodes()  # a node created after the last refresh
            if node not in fake_nodes:
                return
        name, namespace = pod.metadata.name, pod.metadata.namespace
        if pod.metadata.deletion_timestamp is not None:
            options = client.V1DeleteOptions(
                grace_period_seconds=0, preconditions=client.V1Preconditions(uid=pod.metadata.uid)
            )
            _ignore_gone(lambda: core.delete_namespaced_pod(name, namespace, body=options))
        elif (pod.status.phase or "Pending") == "Pending":
            _ignore_gone(lambda: core.patch_namespaced_pod_status(name, namespace, _running_status(pod)))

    while stop_event is None or not stop_event.is_set():
        try:
            refresh_nodes()
            listing = core.list_pod_for_all_namespaces()
            for pod in listing.items:
                handle(pod)
            rv = listing.metadata.resource_version
            while stop_event is None or not stop_event.is_set():
                stream = (
                    cast(Any, watch)
                    .Watch()
                    .stream(core.list_pod_for_all_namespaces, resource_version=rv, timeout_seconds=2)
                )
                for event in stream:
                    obj = event["object"]
                    rv = obj.metadata.resource_version
                    if event["type"] in ("ADDED", "MODIFIED"):
                        handle(obj)
                refresh_nodes()  # pick up new fake nodes even when no pod event arrives
        except Exception:  # 410 Gone, connection loss, ...: back off briefly and re-list
            if stop_event is None:
                time.sleep(0.5)
            else:
                stop_event.wait(0.5)
    api.close()


def _ignore_gone(call: Callable[[], object]) -> None:
    """Run an API call whose target may have vanished meanwhile (404) or changed (409)."""
    from kubernetes.client.exceptions import ApiException

    try:
        call()
    except ApiException as exc:
        if not _is_status(exc, 404, 409):
            raise


def _ready_node_status() -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "fake kubelet",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        }
    }


def _running_status(pod: Any) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    containers = [
        {
            "name": c.name,
            "image": c.image or "fake",
            "imageID": "",
            "ready": True,
            "restartCount": 0,
            "started": True,
            "state": {"running": {"startedAt": now}},
        }
        for c in pod.spec.containers or []
    ]
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": now}
        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    return {
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "containerStatuses": containers,
            "hostIP": LOOPBACK,
            "podIP": "10.0.0.1",
            "startTime": now,
        }
    }


def _main(argv: Sequence[str]) -> int:
    if len(argv) == 2 and argv[0] == "fake-kubelet":
        run_fake_kubelet(Path(argv[1]))
        return 0
    print("usage: python -m kai_ray.cluster.kube.devcluster fake-kubelet KUBECONFIG", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
