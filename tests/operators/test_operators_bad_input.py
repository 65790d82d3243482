"""Bad input is a typed one-line error naming the object and field, never a crash; `kai-ray group` exits 1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from grouping_builders import group, kube, pod
from kai_ray_operators import InvalidWorkload, OwnerChainError, UnsupportedWorkload
from typer.testing import CliRunner

from kai_ray.cli import app

pytestmark = pytest.mark.unit


def _pytorch(worker: dict[str, Any]) -> dict[str, Any]:
    return kube("kubeflow.org/v1", "PyTorchJob", "pt", spec={"pytorchReplicaSpecs": {"Worker": worker}})


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (
            kube(
                "ray.io/v1",
                "RayCluster",
                "rc",
                spec={"workerGroupSpecs": [{"replicas": 1, "minReplicas": 3}]},
            ),
            "RayCluster ml/rc: spec.workerGroupSpecs[0].minReplicas: minReplicas 3 must be between 0 and",
        ),
        (
            kube("ray.io/v1", "RayCluster", "rc", spec={"workerGroupSpecs": [{"replicas": "three"}]}),
            "RayCluster ml/rc: spec.workerGroupSpecs[0].replicas: expected an integer, got 'three'",
        ),
        (
            _pytorch(
                {
                    "replicas": 4,
                    "template": {"metadata": {"annotations": {"kai.scheduler/segment-size": "0"}}},
                }
            ),
            "invalid segment size '0'",
        ),
        (
            kube("kubeflow.org/v1", "TFJob", "tf", spec={"tfReplicaSpecs": []}),
            "TFJob ml/tf: spec.tfReplicaSpecs: expected an object, got []",
        ),
        (
            kube(
                "leaderworkerset.x-k8s.io/v1",
                "LeaderWorkerSet",
                "l",
                spec={"leaderWorkerTemplate": {"size": 0}},
            ),
            "LeaderWorkerSet ml/l: spec.leaderWorkerTemplate.size: a positive size is required, got 0",
        ),
        (
            kube(
                "leaderworkerset.x-k8s.io/v1",
                "LeaderWorkerSet",
                "l",
                spec={"leaderWorkerTemplate": {"size": 4, "subGroupPolicy": {"subGroupSize": 0}}},
            ),
            "segment size 0 must be greater than 1",
        ),
        (
            kube("batch/v1", "Job", "j", annotations={"kai.scheduler/batch-min-member": "-2"}),
            "metadata.annotations[kai.scheduler/batch-min-member]: '-2' is not a valid gang size",
        ),
        (
            kube("amlarc.azureml.com/v1alpha1", "AmlJob", "aml"),
            "spec.job.options.envs.AZUREML_NODE_COUNT: the AzureML node count is required",
        ),
    ],
)
def test_invalid_workload_fields_name_object_and_field(workload: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidWorkload) as raised:
        group(pod("p-0", owner=workload, labels={"training.kubeflow.org/replica-type": "worker"}), workload)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_an_owner_that_cannot_be_read_is_an_owner_chain_error() -> None:
    ghost = kube("example.com/v1", "Unserved", "x")  # a kind no API serves: never listed as an object
    with pytest.raises(OwnerChainError, match="Pod ml/p: cannot read its owner Unserved x: not found"):
        group(pod("p", owner=ghost))


def test_a_karta_described_type_is_unsupported_not_guessed() -> None:
    custom = kube("example.com/v1", "Trainer", "t")
    labels = {
        "run.ai/karta-group": "example.com",
        "run.ai/karta-version": "v1",
        "run.ai/karta-kind": "Trainer",
    }
    karta = {"apiVersion": "run.ai/v1alpha1", "kind": "Karta", "metadata": {"name": "k", "labels": labels}}
    with pytest.raises(UnsupportedWorkload, match="described by a Karta"):
        group(pod("t-0", owner=custom), custom, karta)


def test_unknown_types_use_the_default_grouper_as_kai_does() -> None:
    custom = kube("example.com/v1", "Trainer", "t")
    metadata = group(pod("t-0", owner=custom), custom)
    assert (metadata.name, metadata.min_available) == ("pg-t-t-uid", 1)


def _write_case(tmp_path: Path, case: dict[str, Any]) -> Path:
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(case))
    return path


def test_group_command_reports_the_error_line_and_exits_1(tmp_path: Path) -> None:
    cluster = kube(
        "ray.io/v1", "RayCluster", "rc", spec={"workerGroupSpecs": [{"replicas": 1, "minReplicas": 2}]}
    )
    case = {"name": "bad/ray", "objects": [cluster], "pod": pod("rc-head", owner=cluster)}
    result = CliRunner().invoke(app, ["group", str(_write_case(tmp_path, case)), "--output", "json"])
    assert result.exit_code == 1
    assert result.output.strip().startswith(
        "cannot group: RayCluster ml/rc: spec.workerGroupSpecs[0].minReplicas"
    )


def test_group_command_rejects_a_malformed_case_with_exit_2(tmp_path: Path) -> None:
    case = {"name": "bad/case", "config": {"queueLabel": "x"}, "pod": pod("p")}
    result = CliRunner().invoke(app, ["group", str(_write_case(tmp_path, case))])
    assert result.exit_code == 2
    assert "unknown grouping setting(s): queueLabel" in result.output


def test_group_command_prints_a_table_by_default(tmp_path: Path) -> None:
    case = {"name": "ok/pod", "pod": pod("solo", labels={"kai.scheduler/queue": "team-a"})}
    path = _write_case(tmp_path, case)
    table = CliRunner().invoke(app, ["group", str(path)])
    assert table.exit_code == 0 and "pg-solo-solo-uid" in table.output and "team-a" in table.output
