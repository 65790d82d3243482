"""What the chart hands kai-ray is what kai-ray accepts: the ConfigMap's config.yaml loads with
kai-ray's own loader (the one `serve --config` uses) without a warning, with the actions and
plugins KAI's operator would configure, and every flag of the Deployments is a real flag of
the command they run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from chart_support import EXAMPLES, SCHEDULER, Renderer, find, one

from kai_ray.api.config import SchedulerConfig
from kai_ray.api.scheduler_conf import CONFIG_MAP_KEY, SchedulerConfigError, parse_scheduler_config
from kai_ray.cli import app

pytestmark = pytest.mark.kube  # needs the helm binary

#: KAI's default plugins by descending priority (spec kubernetes-api.md §6), binpack variant.
KAI_BINPACK_PLUGINS = [
    "predicates", "proportion", "priority", "nodeavailability", "resourcetype", "podaffinity", "elastic",
    "kubeflow", "ray", "subgrouporder", "taskorder", "nominatednode", "dynamicresources", "minruntime",
    "topology", "snapshot", "sg-nodelocalgreedy", "sg-multinodegang", "gpupack", "nodeplacement",
    "gpusharingorder",
]  # fmt: skip


def loaded(objects: list[dict[str, Any]]) -> SchedulerConfig:
    """The scheduler's ConfigMap read as `serve --config` reads it; a warning fails the test."""
    text = one(objects, "ConfigMap", SCHEDULER)["data"][CONFIG_MAP_KEY]
    config, warnings = parse_scheduler_config(text, "config.yaml")
    assert warnings == []
    return config


def names(config: SchedulerConfig) -> list[str]:
    return [plugin.name for plugin in config.plugins]


def test_the_default_config_is_kais_default_shard(render: Renderer) -> None:
    config = loaded(render())
    assert config.actions == ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
    assert names(config) == KAI_BINPACK_PLUGINS
    assert config.plugin_arguments("nodeplacement") == {"gpu": "binpack", "cpu": "binpack"}
    assert config.k_value == 1.0


def test_spreading_swaps_the_gpu_plugins_drops_consolidation_and_applies_the_overrides(
    render: Renderer,
) -> None:
    config = loaded(render(EXAMPLES / "spread-custom-plugins.yaml"))
    assert config.actions == ("allocate", "reclaim", "preempt")  # stalegangeviction disabled too
    expected = [p for p in KAI_BINPACK_PLUGINS if p not in ("gpusharingorder", "topology")]
    assert names(config) == [("gpuspread" if p == "gpupack" else p) for p in expected]
    assert config.plugin_arguments("nodeplacement") == {"gpu": "spread", "cpu": "spread"}
    assert config.plugin_arguments("minruntime") == {
        "defaultPreemptMinRuntime": "10m",
        "defaultReclaimMinRuntime": "5m",
    }
    assert config.k_value == 2.0


def test_priorities_reorder_actions_and_plugins_and_arguments_merge(render: Renderer) -> None:
    config = loaded(
        render(
            "scheduler.actions.reclaim.priority=600",
            "scheduler.actions.consolidation.enabled=false",
            "scheduler.plugins.nodeplacement.priority=2000",
            "scheduler.plugins.nodeplacement.arguments.gpu=spread",
            "scheduler.plugins.elastic.enabled=false",
        )
    )
    assert config.actions == ("reclaim", "allocate", "preempt", "stalegangeviction")
    assert names(config)[0] == "nodeplacement" and "elastic" not in names(config)
    # The override replaces one argument; the other keeps the strategy's value.
    assert config.plugin_arguments("nodeplacement") == {"gpu": "spread", "cpu": "binpack"}


def test_a_whole_config_text_replaces_the_generated_one(render: Renderer, tmp_path: Path) -> None:
    text = 'actions: "allocate"\ntiers:\n- plugins:\n  - name: predicates\n  - name: proportion\n'
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"scheduler": {"config": text, "placementStrategy": "spread"}}))
    config = loaded(render(values))
    assert config.actions == ("allocate",)
    assert names(config) == ["predicates", "proportion"]


def test_a_config_kai_ray_would_refuse_is_carried_as_it_is(render: Renderer) -> None:
    """The chart does not second-guess a user's file; serve refuses it at start-up, naming the field."""
    objects = render("scheduler.config=actions: allocate\\, shuffle")
    text = one(objects, "ConfigMap", SCHEDULER)["data"][CONFIG_MAP_KEY]
    with pytest.raises(SchedulerConfigError, match="unknown action 'shuffle'"):
        parse_scheduler_config(text, "config.yaml")


def command_flags(command: str) -> set[str]:
    click_command: Any = typer.main.get_command(app)
    params = click_command.commands[command].params
    return {opt for param in params for opt in (*param.opts, *param.secondary_opts)}


@pytest.mark.parametrize(
    "values",
    [
        (),
        ("podgrouper.inProcess=true",),
        (EXAMPLES / "beside-kai.yaml",),
        (EXAMPLES / "grpc-api.yaml", "scheduler.grpc.tls.clientCASecretName=clients"),
    ],
    ids=["defaults", "in-process", "beside-kai", "grpc-api-mtls"],
)
def test_every_deployment_flag_is_a_flag_of_its_command(render: Renderer, values: tuple[Any, ...]) -> None:
    objects = render(*values, "scheduler.extraArgs={--period=0.5}")
    deployments = find(objects, "Deployment")
    assert deployments
    for deployment in deployments:
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["command"] == ["kai-ray"]
        command, *flags = container["args"]
        known = command_flags(command)
        unknown = [flag for flag in flags if flag.split("=", 1)[0] not in known]
        assert unknown == [], f"{deployment['metadata']['name']}: kai-ray {command} has no {unknown}"
        # Probes and the Service use the port the process listens on.
        port = container["ports"][0]["containerPort"]
        assert f"--metrics-address=0.0.0.0:{port}" in flags
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_the_grpc_flags_are_the_ones_serve_help_lists() -> None:
    """The chart's gRPC flags, by name, are in `kai-ray serve --help` (the parametrized test above
    checks what a rendering passes; this names the ones the chart relies on)."""
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    known = command_flags("serve")
    for flag in ("--grpc-address", "--tls-cert", "--tls-key", "--tls-client-ca", "--token-file"):
        assert flag in known and flag in result.output, flag


def test_time_based_fair_share_is_configured_from_its_value(render: Renderer, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    section = {"clientType": "embedded", "usageParams": {"windowSize": "1w", "halfLifePeriod": "1d"}}
    values.write_text(yaml.safe_dump({"scheduler": {"usageDBConfig": section}}))
    config = loaded(render(values))
    assert config.usage_db is not None
    assert (config.usage_db.client_type, config.usage_db.params.half_life_seconds) == ("embedded", 86400)
    assert loaded(render()).usage_db is None
