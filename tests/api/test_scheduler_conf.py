"""KAI's scheduler configuration file (spec §19.1): what loads, what is refused, what is ignored."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import binds, cluster, open_session, owner_and_borrower, pipelined, two_nodes_one_busy

from kai_ray.api.config import DEFAULT_PLUGINS, KNOWN_PLUGINS, SchedulerConfig
from kai_ray.api.scheduler_conf import (
    SchedulerConfigError,
    load_scheduler_config,
    parse_scheduler_config,
)
from kai_ray.engine.cycle import schedule
from kai_ray.engine.plugins import registry
from kai_ray.engine.plugins.proportion import ProportionPlugin
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scheduler-config" / "config.yaml"
KNOWN_ACTIONS = "allocate, consolidation, reclaim, preempt, stalegangeviction"

KAI_DEFAULT = """\
actions: "allocate, consolidation, reclaim, preempt, stalegangeviction"  # comma list, order = execution order
tiers:                                   # tiers are flattened in order; no other tier semantics
- plugins:
  - name: predicates
  - name: proportion
    arguments: {kValue: "1.0", relcaimerSaturationMultiplier: "1.0"}       # all values are strings
  - name: nodeplacement
    arguments: {gpu: binpack, cpu: binpack}
  - name: minruntime
    arguments: {defaultPreemptMinRuntime: "0s", defaultReclaimMinRuntime: "0s", reclaimResolveMethod: lca}
queueDepthPerAction: {allocate: 200, reclaim: 50}   # optional; per-leaf-queue job cap per action
usageDBConfig:                            # optional; enables time-based fairshare
  clientType: prometheus
  connectionString: http://...:9090
  usageParams: {windowSize: 1w, windowType: sliding, halfLifePeriod: 10m}
scenarioSearchBudgets: {maxActionSearchDuration: {default: 5m}, maxJobSearchDuration: 4m}
"""
"""The example of spec §19.1 (one space less before the first comment, for the line length)."""


def parse(text: str) -> tuple[SchedulerConfig, list[str]]:
    return parse_scheduler_config(text, "config.yaml")


def config_of(text: str) -> SchedulerConfig:
    return parse(text)[0]


def warnings_of(text: str) -> list[str]:
    return parse(text)[1]


def problems_of(text: str) -> list[str]:
    with pytest.raises(SchedulerConfigError) as caught:
        parse(text)
    assert str(caught.value) == "\n".join(caught.value.problems)
    return caught.value.problems


def config_map(embedded: str) -> str:
    """`embedded` as the `config.yaml` key of a ConfigMap manifest, as KAI's operator writes it."""
    body = "".join(f"    {line}\n" for line in embedded.splitlines())
    return (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kai-scheduler, namespace: kai-scheduler}\n"
        f"data:\n  config.yaml: |\n{body}"
    )


# ---------------------------------------------------------------------- what loads


def test_kais_own_example_loads_with_its_order_and_string_arguments() -> None:
    cfg, _ = parse(KAI_DEFAULT)
    assert cfg.actions == ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
    assert [p.name for p in cfg.plugins] == ["predicates", "proportion", "nodeplacement", "minruntime"]
    assert cfg.plugin_arguments("proportion") == {"kValue": "1.0", "relcaimerSaturationMultiplier": "1.0"}
    assert cfg.plugin_arguments("nodeplacement") == {"gpu": "binpack", "cpu": "binpack"}
    assert cfg.plugin_arguments("minruntime") == {
        "defaultPreemptMinRuntime": "0s",
        "defaultReclaimMinRuntime": "0s",
        "reclaimResolveMethod": "lca",
    }
    assert cfg.k_value == 1.0


def test_kais_own_example_warns_once_for_each_setting_kai_ray_does_not_implement() -> None:
    warnings = warnings_of(KAI_DEFAULT)
    assert [w.split(": ")[1] for w in warnings] == [
        "queueDepthPerAction",
        "scenarioSearchBudgets",
    ]
    assert all(w.startswith("config.yaml: ") and ": ignored: " in w for w in warnings)


def test_the_configmap_manifest_loads_like_its_config_yaml_key() -> None:
    bare, bare_warnings = parse(KAI_DEFAULT)
    wrapped, wrapped_warnings = parse(config_map(KAI_DEFAULT))
    assert wrapped == bare
    assert [w.replace("config.yaml: data[config.yaml]: ", "config.yaml: ") for w in wrapped_warnings] == (
        bare_warnings
    )


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", config_map(""), "---\n"])
def test_an_empty_file_is_the_built_in_default(text: str) -> None:
    assert parse(text) == (SchedulerConfig(), [])


@pytest.mark.parametrize("tiers", ["", "tiers: []\n", "tiers:\n", "tiers: null\n"])
def test_empty_tiers_fall_back_to_the_default_plugins(tiers: str) -> None:
    cfg, warnings = parse("actions: allocate\n" + tiers)
    assert [p.name for p in cfg.plugins] == list(DEFAULT_PLUGINS)
    assert cfg.actions == ("allocate",) and warnings == []


def test_tiers_are_flattened_in_order() -> None:
    cfg = config_of(
        "actions: allocate\ntiers:\n"
        "- plugins: [{name: predicates}, {name: proportion}]\n"
        "- plugins: [{name: gpuspread}]\n"
        "- plugins: []\n"
        "- plugins: [{name: nodeplacement}]\n"
    )
    assert [p.name for p in cfg.plugins] == ["predicates", "proportion", "gpuspread", "nodeplacement"]


def test_action_order_is_execution_order_and_spaces_do_not_matter() -> None:
    assert config_of("actions: 'reclaim ,allocate,preempt'\n").actions == ("reclaim", "allocate", "preempt")


@pytest.mark.parametrize(
    ("value", "text"),
    [("2", "2"), ("1.5", "1.5"), ("true", "true"), ("false", "false"), ("", ""), ("'x'", "x")],
)
def test_argument_values_may_be_yaml_scalars_and_become_strings(value: str, text: str) -> None:
    cfg = config_of(
        f"actions: allocate\ntiers:\n- plugins:\n  - name: nominatednode\n    arguments: {{a: {value}}}\n"
    )
    assert cfg.plugin_arguments("nominatednode") == {"a": text}


def test_kvalue_reaches_the_config_and_the_proportion_plugin() -> None:
    cfg = config_of(
        "actions: allocate\ntiers:\n- plugins:\n  - name: proportion\n    arguments: {kValue: 2}\n"
    )
    assert cfg.k_value == 2.0
    session = open_session(cluster().node("n", gpus=1).queue("q").build(), cfg)
    proportion = next(p for p in session.plugins if isinstance(p, ProportionPlugin))
    assert proportion.arguments == {"kValue": "2"}


def test_without_kvalue_the_default_k_value_stays() -> None:
    assert config_of("actions: allocate\ntiers:\n- plugins: [{name: proportion}]\n").k_value == 1.0


def test_a_repeated_action_runs_again_as_in_kai() -> None:
    assert config_of("actions: allocate, reclaim, allocate\n").actions == ("allocate", "reclaim", "allocate")


def test_the_committed_example_loads_without_warnings() -> None:
    cfg, warnings = load_scheduler_config(EXAMPLE)
    assert warnings == []
    assert cfg.actions == ("allocate", "reclaim", "preempt", "stalegangeviction")
    assert cfg.has_plugin("gpuspread") and not cfg.has_plugin("gpupack")
    assert cfg.plugin_arguments("nodeplacement") == {"gpu": "spread", "cpu": "binpack"}


def test_load_reads_a_file_and_names_it_in_messages(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(config_map("actions: allocate\nfoo: 1\n"))
    cfg, warnings = load_scheduler_config(path)
    assert cfg.actions == ("allocate",)
    assert warnings == [f"{path}: data[config.yaml]: foo: unknown setting, ignored"]


def test_load_of_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(SchedulerConfigError, match=f"^{path}: cannot read: "):
        load_scheduler_config(path)


def test_load_of_a_binary_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SchedulerConfigError, match=f"^{path}: not UTF-8 text"):
        load_scheduler_config(path)


# ---------------------------------------------------------------------- what is refused


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "actions: alocate\n",
            f"config.yaml: actions: unknown action 'alocate' (known: {KNOWN_ACTIONS})",
        ),
        (
            "actions: 'allocate,'\n",
            f"config.yaml: actions: empty action name in 'allocate,' (known: {KNOWN_ACTIONS})",
        ),
        (
            "tiers: []\n",
            f"config.yaml: actions: missing; list the actions to run in order, e.g. '{KNOWN_ACTIONS}'",
        ),
        (
            "actions: ''\n",
            f"config.yaml: actions: empty; list the actions to run in order, e.g. '{KNOWN_ACTIONS}'",
        ),
        (
            "actoins: allocate\n",
            "config.yaml: actions: missing (is 'actoins' a misspelling?); list the actions to run in order,"
            f" e.g. '{KNOWN_ACTIONS}'",
        ),
        (
            "actions: [allocate, reclaim]\n",
            "config.yaml: actions: input should be a valid string, got ['allocate', 'reclaim']",
        ),
        (
            "actions: allocate\ntiers: {plugins: []}\n",
            "config.yaml: tiers: input should be a valid list, got {'plugins': []}",
        ),
        (
            "actions: allocate\ntiers:\n- plugins:\n  - arguments: {}\n",
            "config.yaml: tiers[0].plugins[0].name: required field is missing",
        ),
        (
            "actions: allocate\ntiers:\n- plugins:\n  - name: proportion\n    arguments: {kValue: [1]}\n",
            "config.yaml: tiers[0].plugins[0].arguments.kValue: input should be a valid string, got [1]",
        ),
        (
            "actions: allocate\ntiers:\n- plugins:\n  - name: proportion\n    arguments: {kValue: high}\n",
            "config.yaml: tiers[0].plugins[0].arguments.kValue: must be a number, got 'high'",
        ),
        (
            "actions: allocate\ntiers:\n- plugins:\n  - name: proportion\n"
            "    arguments: {relcaimerSaturationMultiplier: yes}\n",
            "config.yaml: tiers[0].plugins[0].arguments.relcaimerSaturationMultiplier: must be a number,"
            " got 'true'",
        ),
        (
            "actions: allocate\nqueueDepthPerAction: 200\n",
            "config.yaml: queueDepthPerAction: input should be a valid dictionary, got 200",
        ),
        (
            "actions: allocate\ntiers:\n- plugins: [\n",
            "config.yaml: line 4: invalid YAML: while parsing a flow node, expected the node content,"
            " but found '<stream end>'",
        ),
        (
            "- allocate\n",
            "config.yaml: expected a mapping with 'actions' and 'tiers', got a list",
        ),
        (
            "actions: allocate\n---\nactions: reclaim\n",
            "config.yaml: expected one YAML document, found 2",
        ),
        (
            "kind: ConfigMap\ndata: {other.yaml: 'actions: allocate'}\n",
            "config.yaml: data: the ConfigMap has no 'config.yaml' key",
        ),
        (
            "kind: ConfigMap\n",
            "config.yaml: data: the ConfigMap has no 'config.yaml' key",
        ),
        (
            "kind: ConfigMap\ndata: {config.yaml: {actions: allocate}}\n",
            "config.yaml: data[config.yaml]: must be a string holding the scheduler configuration",
        ),
        (
            config_map("actions: alocate"),
            f"config.yaml: data[config.yaml]: actions: unknown action 'alocate' (known: {KNOWN_ACTIONS})",
        ),
        (
            config_map("actions: allocate\ntiers: [\n"),
            "config.yaml: data[config.yaml]: line 3: invalid YAML: while parsing a flow node,"
            " expected the node content, but found '<stream end>'",
        ),
    ],
)
def test_errors_name_the_file_and_the_field(text: str, expected: str) -> None:
    assert problems_of(text) == [expected]


def test_every_problem_is_reported_at_once() -> None:
    problems = problems_of(
        "actions: allocate, shuffle, evict\ntiers:\n- plugins:\n"
        "  - name: proportion\n    arguments: {kValue: x, relcaimerSaturationMultiplier: y}\n"
    )
    assert [p.split(": ", 2)[1] for p in problems] == [
        "actions",
        "actions",
        "tiers[0].plugins[0].arguments.kValue",
        "tiers[0].plugins[0].arguments.relcaimerSaturationMultiplier",
    ]


def test_the_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown action"):
        parse("actions: alocate\n")


# ---------------------------------------------------------------------- what is skipped or ignored


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "actions: allocate\ntiers:\n- plugins: [{name: proportion}, {name: gpupak}]\n",
            "config.yaml: tiers[0].plugins[1].name: unknown plugin 'gpupak', skipped"
            " (did you mean 'gpupack'?)",
        ),
        (
            "actions: allocate\ntiers:\n- plugins: [{name: proportion}, {name: numa}]\n",
            "config.yaml: tiers[0].plugins[1].name: unknown plugin 'numa', skipped",
        ),
        (
            "actions: allocate\ntiers:\n- plugins: [{name: proportion}, {name: proportion}]\n",
            "config.yaml: tiers[0].plugins[1].name: plugin 'proportion' listed again,"
            " only its first entry is used",
        ),
        (
            "actions: allocate\ntier: []\n",
            "config.yaml: tier: unknown setting, ignored (did you mean 'tiers'?)",
        ),
        (
            "actions: allocate\ntiers:\n- plugins: [{name: proportion}]\n  priority: 1\n",
            "config.yaml: tiers[0].priority: unknown setting, ignored",
        ),
        (
            "actions: allocate\ntiers:\n- plugins: [{name: proportion, argument: {kValue: '2'}}]\n",
            "config.yaml: tiers[0].plugins[0].argument: unknown setting, ignored (did you mean 'arguments'?)",
        ),
        (
            "actions: allocate\ntiers:\n- plugins: [{name: nodeplacement, arguments: {gpu: sprd}}]\n",
            "config.yaml: tiers[0].plugins[0].arguments.gpu: 'sprd' is neither binpack nor spread;"
            " kai-ray binpacks",
        ),
        (
            "actions: allocate\nqueueDepthPerAction: {allocate: 200}\n",
            "config.yaml: queueDepthPerAction: ignored: kai-ray has no per-action queue depth;"
            " every action considers every job",
        ),
        (
            "actions: allocate\nscenarioSearchBudgets: {maxJobSearchDuration: 4m}\n",
            "config.yaml: scenarioSearchBudgets: ignored: kai-ray bounds the victim search by a count"
            " of scenarios (the same on every machine), not by time",
        ),
    ],
)
def test_warnings_name_the_file_and_the_field(text: str, expected: str) -> None:
    assert warnings_of(text) == [expected]


def test_skipped_plugins_are_left_out_and_the_rest_keep_their_order() -> None:
    cfg = config_of(
        "actions: allocate\ntiers:\n- plugins: [{name: predicates}, {name: numa}, {name: proportion},"
        " {name: proportion, arguments: {kValue: '3'}}]\n"
    )
    assert [p.name for p in cfg.plugins] == ["predicates", "proportion"]
    assert cfg.plugin_arguments("proportion") == {}


@pytest.mark.parametrize("section", ["queueDepthPerAction", "scenarioSearchBudgets"])
def test_an_empty_ignored_section_is_not_worth_a_warning(section: str) -> None:
    assert warnings_of(f"actions: allocate\n{section}: {{}}\n") == []


def test_known_plugin_names_are_the_engines() -> None:
    """kai_ray.api may not import the engine, so it keeps its own list; this keeps the two equal."""
    built_in = {name for name, cls in registry.PLUGINS.items() if cls.__module__.startswith("kai_ray.")}
    assert built_in | registry.ACCEPTED_WITHOUT_BEHAVIOUR == KNOWN_PLUGINS
    assert all(registry.plugin_class(name) is not None for name in KNOWN_PLUGINS)
    assert set(DEFAULT_PLUGINS) <= KNOWN_PLUGINS


# ---------------------------------------------------------------------- a loaded config schedules


def with_plugins(plugins: str, actions: str = "allocate") -> SchedulerConfig:
    return config_of(f"actions: {actions}\ntiers:\n- plugins:\n{plugins}")


PROPORTION = "  - name: proportion\n"


@pytest.mark.parametrize(("strategy", "node"), [("binpack", "n2"), ("spread", "n1")])
def test_nodeplacement_from_the_file_decides_the_node(strategy: str, node: str) -> None:
    cfg = with_plugins(PROPORTION + f"  - name: nodeplacement\n    arguments: {{gpu: {strategy}}}\n")
    assert binds(schedule(compile_snapshot(two_nodes_one_busy()), cfg)) == {"new-0": node}


@pytest.mark.parametrize(("plugin", "same_device"), [("gpupack", True), ("gpuspread", False)])
def test_gpu_sharing_plugin_from_the_file_packs_or_spreads_devices(plugin: str, same_device: bool) -> None:
    state = (
        cluster()
        .node("n1", gpus=2, gpu_memory_mib=40_000)
        .queue("q")
        .job("p1", queue="q", gpus=0.5, created=0)
        .job("p2", queue="q", gpus=0.5, created=1)
        .build()
    )
    cfg = with_plugins(PROPORTION + f"  - name: {plugin}\n  - name: nodeplacement\n")
    groups = {b.task: b.gpu_groups for b in schedule(compile_snapshot(state), cfg).binds}
    assert (groups["p1-0"] == groups["p2-0"]) is same_device


def test_only_the_files_actions_run() -> None:
    state = owner_and_borrower()
    allocate_only = schedule(compile_snapshot(state), with_plugins(PROPORTION, "allocate"))
    assert allocate_only.evictions == [] and pipelined(allocate_only) == {}
    with_reclaim = schedule(compile_snapshot(state), with_plugins(PROPORTION, "'allocate, reclaim'"))
    assert [e.task for e in with_reclaim.evictions] == ["borrowed-0"]


def test_the_committed_example_spreads_gpu_jobs() -> None:
    cfg, _ = load_scheduler_config(EXAMPLE)
    assert binds(schedule(compile_snapshot(two_nodes_one_busy()), cfg)) == {"new-0": "n1"}


def test_the_configuration_page_shows_the_committed_example_verbatim() -> None:
    page = (EXAMPLE.parents[2] / "docs" / "configuration.md").read_text()
    shown = page.split("```yaml\n", 1)[1].split("```\n", 1)[0]
    assert shown == EXAMPLE.read_text()
