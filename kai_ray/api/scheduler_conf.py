"""Read KAI's scheduler configuration file (spec §19.1) into a `SchedulerConfig`.

A KAI deployment keeps this file in the scheduler's ConfigMap under the key
`config.yaml`; accepting the same text (or the whole ConfigMap manifest) lets
an existing KAI setup run under kai-ray unchanged. The load rules are KAI's:
an empty file means the built-in defaults, empty `tiers` mean the default
plugins, missing or unknown actions are errors and unknown plugins are
skipped. Where kai-ray deliberately does less than KAI (settings it does not
implement), the file still loads and the caller gets a warning per ignored
setting, so nothing is silently dropped.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from kai_ray.api._errors import describe_errors, suggest
from kai_ray.api._yaml import YamlDocument, YamlSyntaxError, parse_documents
from kai_ray.api.config import KNOWN_PLUGINS, ActionName, PlacementStrategy, PluginSpec, SchedulerConfig
from kai_ray.api.usage_db import UsageDBConfig, parse_usage_db_config

CONFIG_MAP_KEY = "config.yaml"
"""The ConfigMap data key KAI's scheduler reads its configuration from."""

KNOWN_ACTIONS: dict[str, ActionName] = {name: name for name in get_args(ActionName)}

NUMERIC_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "proportion": ("kValue", "relcaimerSaturationMultiplier"),
}
"""Plugin arguments the engine reads as numbers: a bad one would fail every cycle, so it fails the load."""

PLACEMENT_ARGUMENTS = ("gpu", "cpu")

IGNORED_SECTIONS: dict[str, str] = {
    "queueDepthPerAction": "kai-ray has no per-action queue depth; every action considers every job",
    "scenarioSearchBudgets": (
        "kai-ray bounds the victim search by a count of scenarios (the same on every machine), not by time"
    ),
}
"""KAI settings kai-ray accepts but does not implement, with the reason shown in the warning."""


class SchedulerConfigError(ValueError):
    """The file cannot be used as a scheduler configuration.

    Each problem is one line naming the file and the field, so a user can fix
    all of them in one go; `problems` holds the lines.
    """

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def _argument_text(value: Any) -> Any:
    """KAI's plugin arguments are strings; a YAML number or boolean is taken as its text.

    Booleans are written the way Go writes them (`true`), since that is what a
    KAI plugin would have parsed. Anything else goes on to the string check.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if value is None:
        return ""
    return value


ArgumentText = Annotated[str, BeforeValidator(_argument_text)]


class _Section(BaseModel):
    """A part of the file: mistyped values are errors, unknown keys are kept for a warning."""

    model_config = ConfigDict(extra="allow", strict=True)


class _PluginEntry(_Section):
    name: str
    arguments: dict[str, ArgumentText] | None = None


class _Tier(_Section):
    plugins: list[_PluginEntry] | None = None


class _ConfigFile(_Section):
    actions: str | None = None
    tiers: list[_Tier] | None = None
    queue_depth_per_action: dict[str, Any] | None = Field(default=None, alias="queueDepthPerAction")
    usage_db_config: dict[str, Any] | None = Field(default=None, alias="usageDBConfig")
    scenario_search_budgets: dict[str, Any] | None = Field(default=None, alias="scenarioSearchBudgets")


_TOP_LEVEL_KEYS = [field.alias or name for name, field in _ConfigFile.model_fields.items()]


def load_scheduler_config(path: Path) -> tuple[SchedulerConfig, list[str]]:
    """The configuration in `path` and one warning per setting kai-ray ignores or skips.

    `path` holds KAI's `config.yaml` text or a ConfigMap manifest carrying it.
    Raises `SchedulerConfigError` when KAI would refuse the file too.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise SchedulerConfigError([f"{path}: cannot read: {error.strerror}"]) from error
    except UnicodeDecodeError as error:
        raise SchedulerConfigError([f"{path}: not UTF-8 text: {error.reason}"]) from error
    return parse_scheduler_config(text, str(path))


def parse_scheduler_config(text: str, source: str) -> tuple[SchedulerConfig, list[str]]:
    """Like `load_scheduler_config`, for text already in hand; `source` names it in messages."""
    data = _one_document(text, source)
    if isinstance(data, dict) and data.get("kind") == "ConfigMap":
        embedded = _config_map_text(data, source)
        source = f"{source}: data[{CONFIG_MAP_KEY}]"
        data = _one_document(embedded, source)
    if data is None:
        return SchedulerConfig(), []
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise SchedulerConfigError([f"{source}: expected a mapping with 'actions' and 'tiers', got a {kind}"])
    return _Reader(source).read(data)


def _one_document(text: str, source: str) -> Any:
    """The single YAML document in `text`, or None for an empty (or comment-only) text."""
    documents: list[YamlDocument] = []
    for document in parse_documents(text):
        if isinstance(document, YamlSyntaxError):
            raise SchedulerConfigError([f"{source}: line {document.line}: {document.message}"])
        documents.append(document)
    if len(documents) > 1:
        raise SchedulerConfigError([f"{source}: expected one YAML document, found {len(documents)}"])
    return documents[0].data if documents else None


def _config_map_text(manifest: dict[str, Any], source: str) -> str:
    data = manifest.get("data")
    if not isinstance(data, dict) or CONFIG_MAP_KEY not in data:
        raise SchedulerConfigError([f"{source}: data: the ConfigMap has no {CONFIG_MAP_KEY!r} key"])
    text = data[CONFIG_MAP_KEY]
    if not isinstance(text, str):
        raise SchedulerConfigError(
            [f"{source}: data[{CONFIG_MAP_KEY}]: must be a string holding the scheduler configuration"]
        )
    return text


class _Reader:
    """One pass over a parsed file, collecting every error and warning before deciding."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def error(self, field: str, message: str) -> None:
        self.errors.append(f"{self.source}: {field}: {message}")

    def warn(self, field: str, message: str) -> None:
        self.warnings.append(f"{self.source}: {field}: {message}")

    def read(self, data: dict[str, Any]) -> tuple[SchedulerConfig, list[str]]:
        try:
            parsed = _ConfigFile.model_validate(data)
        except ValidationError as error:
            for field, message in describe_errors(error, _ConfigFile):
                self.error(field, message)
            raise SchedulerConfigError(self.errors) from None
        self._warn_unknown_keys("", parsed, _TOP_LEVEL_KEYS)
        for key, reason in IGNORED_SECTIONS.items():
            if data.get(key):
                self.warn(key, f"ignored: {reason}")
        config = SchedulerConfig(actions=self._actions(parsed.actions, list(parsed.model_extra or {})))
        if parsed.usage_db_config is not None:
            config = config.model_copy(update={"usage_db": self._usage_db(parsed.usage_db_config)})
        if parsed.tiers:
            config = config.model_copy(update={"plugins": self._plugins(parsed.tiers)})
        if self.errors:
            raise SchedulerConfigError(self.errors)
        k_value = config.plugin_arguments("proportion").get("kValue")
        if k_value is not None:
            config = config.model_copy(update={"k_value": float(k_value)})
        return config, self.warnings

    def _usage_db(self, raw: dict[str, Any]) -> UsageDBConfig | None:
        """Time-based fair share's source and window (spec §7); None after an error."""
        usage_db, errors, warnings = parse_usage_db_config(raw)
        for field, message in errors:
            self.error(field, message)
        for field, message in warnings:
            self.warn(field, message)
        return usage_db

    def _warn_unknown_keys(self, where: str, section: _Section, known: list[str]) -> None:
        for key in section.model_extra or {}:
            field = f"{where}.{key}" if where else key
            self.warn(field, f"unknown setting, ignored{suggest(key, known)}")

    def _actions(self, text: str | None, unknown_keys: list[str]) -> tuple[ActionName, ...]:
        """KAI's comma-separated list; order is execution order, and a repeated action runs again.

        A missing list is often a misspelt key, whose warning would be lost with
        the error, so the error points at it.
        """
        known = ", ".join(KNOWN_ACTIONS)
        if text is None:
            misspelt = difflib.get_close_matches("actions", unknown_keys, n=1, cutoff=0.6)
            hint = f" (is {misspelt[0]!r} a misspelling?)" if misspelt else ""
            self.error("actions", f"missing{hint}; list the actions to run in order, e.g. {known!r}")
            return ()
        if not text.strip():
            self.error("actions", f"empty; list the actions to run in order, e.g. {known!r}")
            return ()
        actions: list[ActionName] = []
        for part in text.split(","):
            name = part.strip()
            if name in KNOWN_ACTIONS:
                actions.append(KNOWN_ACTIONS[name])
            elif not name:
                self.error("actions", f"empty action name in {text!r} (known: {known})")
            else:
                self.error("actions", f"unknown action {name!r} (known: {known})")
        return tuple(actions)

    def _plugins(self, tiers: list[_Tier]) -> tuple[PluginSpec, ...]:
        """The tiers' plugins flattened in order (KAI gives tiers no other meaning)."""
        plugins: list[PluginSpec] = []
        for t, tier in enumerate(tiers):
            self._warn_unknown_keys(f"tiers[{t}]", tier, ["plugins"])
            for p, entry in enumerate(tier.plugins or ()):
                where = f"tiers[{t}].plugins[{p}]"
                self._warn_unknown_keys(where, entry, ["name", "arguments"])
                if entry.name not in KNOWN_PLUGINS:
                    hint = suggest(entry.name, KNOWN_PLUGINS)
                    self.warn(f"{where}.name", f"unknown plugin {entry.name!r}, skipped{hint}")
                elif any(plugin.name == entry.name for plugin in plugins):
                    message = f"plugin {entry.name!r} listed again, only its first entry is used"
                    self.warn(f"{where}.name", message)
                else:
                    arguments = entry.arguments or {}
                    self._check_arguments(where, entry.name, arguments)
                    plugins.append(PluginSpec(name=entry.name, arguments=arguments))
        return tuple(plugins)

    def _check_arguments(self, where: str, plugin: str, arguments: dict[str, str]) -> None:
        for key in NUMERIC_ARGUMENTS.get(plugin, ()):
            if key in arguments and not _is_number(arguments[key]):
                self.error(f"{where}.arguments.{key}", f"must be a number, got {arguments[key]!r}")
        if plugin == "nodeplacement":
            strategies = get_args(PlacementStrategy)
            for key in PLACEMENT_ARGUMENTS:
                if key in arguments and arguments[key] not in strategies:
                    message = f"{arguments[key]!r} is neither binpack nor spread; kai-ray binpacks"
                    self.warn(f"{where}.arguments.{key}", message)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
