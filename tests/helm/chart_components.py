"""The chart's components run on this machine as their pods would run them, and what the API
server's audit log says they were refused: shared by the install and the migration tests."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from chart_support import NAMESPACE, one
from kube_serve import log_entries, stop_process, wait_until

from kai_ray.devcluster import DevCluster, read_audit_events

KAI_RAY = Path(sys.executable).parent / "kai-ray"


class Component:
    """One Deployment's container run here: its command and args as installed, as its ServiceAccount.

    What a pod would fill in is filled in: $(POD_NAME), the ConfigMap mounted where --config
    points, and the metrics port (any free one on loopback instead of 0.0.0.0:8080).
    """

    def __init__(
        self, deployment: dict[str, Any], objects: list[dict[str, Any]], kubeconfig: Path, work: Path
    ) -> None:
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        self.name = deployment["metadata"]["name"]
        self.identity = f"{self.name}-7d9f8b6c5-x2x4z"
        self.account = spec["serviceAccountName"]
        mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
        args: list[str] = []
        for arg in container["args"]:
            arg = arg.replace("$(POD_NAME)", self.identity)
            flag, _, value = arg.partition("=")
            if flag == "--config":
                args.append(f"--config={self.mounted_file(Path(value), spec, mounts, objects, work)}")
            elif flag == "--metrics-address":
                args.append("--metrics-address=127.0.0.1:0")
            else:
                args.append(arg)
        assert not any("$(" in arg for arg in args), args
        self.argv = [str(KAI_RAY), *args, f"--kubeconfig={kubeconfig}"]
        assert container["command"] == ["kai-ray"]
        self.log = work / f"{self.name}.log"
        with self.log.open("wb") as stderr:
            self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=stderr)

    @staticmethod
    def mounted_file(
        path: Path, spec: dict[str, Any], mounts: dict[str, str], objects: list[dict[str, Any]], work: Path
    ) -> Path:
        """The file a pod would see at `path`: the key of the ConfigMap whose volume is mounted there."""
        (volume,) = [v for v in spec["volumes"] if mounts.get(v["name"]) == str(path.parent)]
        config_map = one(objects, "ConfigMap", volume["configMap"]["name"])
        local = work / path.name
        local.write_text(config_map["data"][path.name])
        return local

    def entries(self) -> list[dict[str, Any]]:
        return log_entries(self.log)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])

    def url(self) -> str:
        """Its /metrics, /healthz and /readyz address (it logs the port it got)."""
        found: list[str] = []

        def logged() -> bool:
            assert self.proc.poll() is None, f"{self.name} exited {self.proc.returncode}\n{self.tail()}"
            found.extend(
                str(e["message"]).split("metrics on ", 1)[1].split(" ", 1)[0].removesuffix("/metrics")
                for e in self.entries()
                if str(e.get("message", "")).startswith("metrics on ")
            )
            return bool(found)

        wait_until(logged, 60, f"{self.name}'s metrics address\n{self.tail()}")
        return found[0]

    def stop(self) -> int:
        return stop_process(self.proc)


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def account(name: str) -> str:
    return f"system:serviceaccount:{NAMESPACE}:{name}"


def audited(cluster: DevCluster, user: str) -> list[dict[str, Any]]:
    return [e for e in read_audit_events(cluster) if (e.get("user") or {}).get("username") == user]


def refusals(cluster: DevCluster, user: str) -> list[str]:
    return [
        f"{e['verb']} {e.get('objectRef')}"
        for e in audited(cluster, user)
        if (e.get("annotations") or {}).get("authorization.k8s.io/decision") == "forbid"
    ]
