"""`scheduler.grpc.enabled`: the scheduler serves the gRPC API (docs/grpc.md) behind a ClusterIP
Service of its own, with TLS and bearer tokens from Secrets mounted where its flags point.

Why a Service of its own: the metrics Service is headless (Prometheus scrapes every replica),
which gives clients no single address, and a Service's clusterIP cannot change on upgrade.  Every
ready replica may take the API's traffic: submits and cancels are the user's writes, not fenced by
the lease, and the leader schedules what any replica accepted.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import (
    CHART,
    EXAMPLES,
    NAMESPACE,
    SCHEDULER,
    HelmRunner,
    Renderer,
    find,
    one,
    template_args,
)

pytestmark = pytest.mark.kube  # needs the helm binary

GRPC_SERVICE = f"{SCHEDULER}-grpc"


def scheduler_container(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The scheduler Deployment's pod spec and its one container."""
    spec = one(objects, "Deployment", SCHEDULER)["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return spec, container


def flags(container: dict[str, Any]) -> dict[str, str]:
    return dict(arg.partition("=")[::2] for arg in container["args"][1:] if arg.startswith("--"))


def mounted_secret_file(spec: dict[str, Any], container: dict[str, Any], path: str) -> tuple[str, str]:
    """(Secret name, key) of the file a pod sees at `path`, or a failed assertion."""
    file = Path(path)
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert str(file.parent) in mounts, f"nothing is mounted at {file.parent}"
    (volume,) = [v for v in spec["volumes"] if v["name"] == mounts[str(file.parent)]]
    secret = volume["secret"]
    (key,) = [item["key"] for item in secret["items"] if item["path"] == file.name]
    return secret["secretName"], key


@pytest.mark.parametrize("values", [(), ("podgrouper.inProcess=true",)], ids=["separate", "in-process"])
def test_off_by_default_nothing_of_the_api_is_rendered(render: Renderer, values: tuple[str, ...]) -> None:
    objects = render(*values)
    spec, container = scheduler_container(objects)
    assert not any(arg.startswith(("--grpc", "--tls", "--token")) for arg in container["args"])
    assert [p["name"] for p in container["ports"]] == ["http-metrics"]
    assert find(objects, "Service", GRPC_SERVICE) == []
    assert {v["name"] for v in spec["volumes"]} == {"config", "tmp"}


def test_the_example_serves_tls_and_tokens_behind_a_cluster_ip_service(render: Renderer) -> None:
    objects = render(EXAMPLES / "grpc-api.yaml")
    spec, container = scheduler_container(objects)
    given = flags(container)
    assert given["--grpc-address"] == "0.0.0.0:50051"
    assert "--tls-client-ca" not in given
    assert mounted_secret_file(spec, container, given["--tls-cert"]) == ("kai-ray-grpc-tls", "tls.crt")
    assert mounted_secret_file(spec, container, given["--tls-key"]) == ("kai-ray-grpc-tls", "tls.key")
    assert mounted_secret_file(spec, container, given["--token-file"]) == (
        "kai-ray-grpc-tokens",
        "tokens.txt",
    )
    # Secrets are read-only, and never mounted inside the ConfigMap's directory.
    for mount in container["volumeMounts"]:
        if mount["name"].startswith("grpc-"):
            assert mount["readOnly"] is True
            assert not mount["mountPath"].startswith("/etc/kai-ray/")
    # The metrics port stays first (the probes and the metrics Service name it); grpc beside it.
    assert [p["name"] for p in container["ports"]] == ["http-metrics", "grpc"]
    assert container["ports"][1]["containerPort"] == 50051

    service = one(objects, "Service", GRPC_SERVICE)
    assert service["metadata"]["namespace"] == NAMESPACE
    assert service["spec"]["type"] == "ClusterIP" and "clusterIP" not in service["spec"]  # not headless
    assert service["spec"]["ports"] == [
        {"name": "grpc", "port": 50051, "targetPort": "grpc", "protocol": "TCP"}
    ]
    pod_labels = one(objects, "Deployment", SCHEDULER)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    # The metrics Service stays headless, and only serves metrics.
    metrics = one(objects, "Service", SCHEDULER)
    assert metrics["spec"]["clusterIP"] == "None"
    assert [p["name"] for p in metrics["spec"]["ports"]] == ["http-metrics"]


def test_port_service_type_and_mutual_tls_follow_the_values(render: Renderer) -> None:
    objects = render(
        "scheduler.grpc.enabled=true",
        "scheduler.grpc.port=9443",
        "scheduler.grpc.service.type=LoadBalancer",
        "scheduler.grpc.service.annotations.team=ml",
        "scheduler.grpc.tls.secretName=server-tls",
        "scheduler.grpc.tls.clientCASecretName=clients",
        "scheduler.grpc.tls.clientCAKey=ca.pem",
    )
    spec, container = scheduler_container(objects)
    given = flags(container)
    assert given["--grpc-address"] == "0.0.0.0:9443"
    assert mounted_secret_file(spec, container, given["--tls-client-ca"]) == ("clients", "ca.pem")
    assert "--token-file" not in given
    service = one(objects, "Service", GRPC_SERVICE)
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["metadata"]["annotations"] == {"team": "ml"}
    assert service["spec"]["ports"][0]["port"] == 9443
    assert {"name": "grpc", "containerPort": 9443, "protocol": "TCP"} in container["ports"]


def test_plain_text_without_secrets_mounts_nothing(render: Renderer) -> None:
    spec, container = scheduler_container(render("scheduler.grpc.enabled=true"))
    assert flags(container)["--grpc-address"] == "0.0.0.0:50051"
    assert not any(arg.startswith(("--tls", "--token")) for arg in container["args"])
    assert {v["name"] for v in spec["volumes"]} == {"config", "tmp"}


def test_mutual_tls_without_a_server_certificate_is_refused(helm: HelmRunner) -> None:
    proc = helm(
        *template_args("scheduler.grpc.enabled=true", "scheduler.grpc.tls.clientCASecretName=clients"),
        check=False,
    )
    assert proc.returncode != 0
    assert "clientCASecretName needs scheduler.grpc.tls.secretName" in proc.stderr


def notes(helm: HelmRunner, tmp_path: Path, *values: str | Path) -> str:
    """NOTES.txt as `helm install` would print it, rendered offline: `helm template` leaves NOTES.txt
    out, so a copy of the chart renders it as a define, into the text of a stand-in object."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    text = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "_notes.tpl").write_text('{{- define "notes" -}}\n' + text + "{{- end -}}\n")
    (chart / "templates" / "notes.yaml").write_text(
        'kind: Notes\ntext: |\n{{ include "notes" . | indent 2 }}\n'
    )
    args = template_args(*values)
    args[args.index(str(CHART))] = str(chart)
    rendered = helm(*args, "--show-only", "templates/notes.yaml").stdout
    return str(yaml.safe_load(rendered)["text"])


def test_the_notes_say_where_the_api_is_and_how_it_is_secured(helm: HelmRunner, tmp_path: Path) -> None:
    assert "gRPC" not in notes(helm, tmp_path / "off")
    shown = notes(helm, tmp_path / "on", EXAMPLES / "grpc-api.yaml")
    assert f"{GRPC_SERVICE}.{NAMESPACE}.svc:50051" in shown
    assert "TLS; bearer tokens from Secret kai-ray-grpc-tokens" in shown
    assert f"port-forward svc/{GRPC_SERVICE} 50051:50051" in shown
    assert "kai-ray queues --server localhost:50051 --tls-ca ca.pem --token" in shown
    assert "clear text" not in shown
    plain = notes(
        helm, tmp_path / "plain", "scheduler.grpc.enabled=true", "scheduler.grpc.tokens.secretName=t"
    )
    assert "plain text, no TLS" in plain and "clear text" in plain
