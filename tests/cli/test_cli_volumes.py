"""`kai-ray simulate` with volumes and ConfigMaps (issue 34, items 6, 7 and 10): a claim bound to
a local volume holds its pod to the volume's node, a missing ConfigMap keeps a pod waiting with a
reason until it exists, and a claim naming an unknown StorageClass is reported naming the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kai_ray.cli import app

pytestmark = pytest.mark.unit

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"

LOCAL_VOLUME = """\
apiVersion: v1
kind: PersistentVolume
metadata: {name: local-ssd-4}
spec:
  capacity: {storage: 100Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: local
  local: {path: /mnt/ssd}
  claimRef: {namespace: team-a, name: dataset}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [gpu-node-4]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: dataset, namespace: team-a}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: local
  volumeName: local-ssd-4
  resources: {requests: {storage: 100Gi}}
status: {phase: Bound}
"""


def reader(*container_extra: str, claim: str = "dataset") -> str:
    """A one-GPU pod of team-a mounting `claim`; `container_extra`: more lines of its container."""
    extra = "".join(f"    {line}\n" for line in container_extra)
    return f"""\
apiVersion: v1
kind: Pod
metadata: {{name: reader, namespace: team-a, labels: {{kai.scheduler/queue: team-a}}}}
spec:
  schedulerName: kai-scheduler
  containers:
  - name: main
    image: busybox
    resources: {{limits: {{nvidia.com/gpu: "1"}}}}
{extra}  volumes:
  - name: data
    persistentVolumeClaim: {{claimName: {claim}}}
"""


def cluster_dir(tmp_path: Path, **files: str) -> Path:
    """The quickstart's four nodes and queues, and `files` (name → YAML) beside them."""
    for name in ("nodes.yaml", "queues.yaml"):
        shutil.copy(QUICKSTART / name, tmp_path / name)
    for name, text in files.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    return tmp_path


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def reader_node(path: Path) -> str | None:
    code, out, err = run("simulate", str(path), "--output", "json")
    assert code == 0, err
    (state,) = [s for key, s in json.loads(out)["tasks"].items() if key.endswith("/reader")]
    node: str | None = state["node"]
    return node


def test_a_pod_whose_claim_is_bound_to_a_local_volume_lands_on_the_volumes_node(tmp_path: Path) -> None:
    # Every quickstart node is empty and alike: without the volume the pod goes to gpu-node-1.
    assert reader_node(cluster_dir(tmp_path, storage=LOCAL_VOLUME, pod=reader())) == "gpu-node-4"


def test_a_pod_waiting_for_a_config_map_says_so_and_binds_once_it_exists(tmp_path: Path) -> None:
    path = cluster_dir(
        tmp_path, storage=LOCAL_VOLUME, pod=reader("envFrom: [{configMapRef: {name: settings}}]")
    )
    code, out, _ = run("simulate", str(path))
    assert code == 0
    assert "configmap team-a/settings not found" in out
    assert reader_node(path) is None
    (path / "settings.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: team-a}\n"
        "data: {MODE: train}\n"
    )
    assert reader_node(path) == "gpu-node-4"


def test_a_claim_naming_an_unknown_storage_class_is_reported_naming_the_volume(tmp_path: Path) -> None:
    claim = (
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: scratch, namespace: team-a}\n"
        "spec: {accessModes: [ReadWriteOnce], storageClassName: fast,"
        " resources: {requests: {storage: 1Gi}}}\n"
    )
    code, _, err = run("simulate", str(cluster_dir(tmp_path, claim=claim, pod=reader(claim="scratch"))))
    assert code == 2
    assert err.strip().splitlines() == [
        f"{tmp_path / 'pod.yaml'}: Pod/team-a/reader: spec.volumes[0].persistentVolumeClaim: "
        "persistentvolumeclaim team-a/scratch names storageClassName 'fast', which does not exist"
    ]
