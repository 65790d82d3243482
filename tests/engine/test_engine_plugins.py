"""Plugins are chosen, switched off and replaced by configuration alone."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from builders import binds, cluster, config, run_cycle

from kai_ray.api.config import PluginSpec, SchedulerConfig
from kai_ray.engine.jobs import Task
from kai_ray.engine.plugins import registry
from kai_ray.engine.plugins.base import Plugin

pytestmark = pytest.mark.unit


class PreferLastNode(Plugin):
    """A stand-in scoring plugin: always the node with the highest row wins."""

    name = "prefer-last-node"

    def node_scores(self, task: Task, rows: np.ndarray) -> np.ndarray:
        return rows.astype(float) * 1e6


@pytest.fixture
def registered() -> Iterator[None]:
    registry.register(PreferLastNode)
    yield
    del registry.PLUGINS[PreferLastNode.name]


def two_nodes() -> object:
    return (
        cluster()
        .node("a", gpus=8)
        .node("b", gpus=8)
        .queue("q", gpu_quota=16)
        .job("j", queue="q", gpus=1)
        .build()
    )


def test_a_registered_plugin_named_in_the_config_takes_part(registered: None) -> None:
    state = two_nodes()
    default = config()
    extended = default.model_copy(update={"plugins": (*default.plugins, PluginSpec(name="prefer-last-node"))})
    assert binds(run_cycle(state, default)) == {"j-0": "a"}
    assert binds(run_cycle(state, extended)) == {"j-0": "b"}


def test_unknown_plugin_names_are_skipped_not_fatal() -> None:
    state = two_nodes()
    cfg = SchedulerConfig(plugins=(PluginSpec(name="no-such-plugin"), PluginSpec(name="nodeplacement")))
    assert binds(run_cycle(state, cfg)) == {"j-0": "a"}


def test_switching_off_proportion_removes_queue_limits() -> None:
    state = (
        cluster()
        .node("a", gpus=8)
        .queue("capped", gpu_quota=1, gpu_limit=1)
        .job("j", queue="capped", gpus=2)
        .build()
    )
    assert binds(run_cycle(state, config())) == {}
    assert binds(run_cycle(state, config(drop=["proportion"]))) == {"j-0": "a"}
