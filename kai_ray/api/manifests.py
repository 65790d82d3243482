"""Load KAI-style manifests (files or directories of YAML) into the API models.

Loading never stops at the first mistake: every YAML error, unknown kind,
mistyped field and duplicate becomes a `ManifestProblem` and only the object
concerned is dropped. A user fixing a directory of manifests sees all of its
problems in one run, each on one line that names file, object and field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from pydantic import ValidationError

from kai_ray.api._errors import describe_errors, suggest
from kai_ray.api._yaml import YamlSyntaxError, parse_documents
from kai_ray.api.bindrequest import BindRequest
from kai_ray.api.constants import DEFAULT_NAMESPACE
from kai_ray.api.core import Namespace, Node, Pod, PriorityClass
from kai_ray.api.podgroup import PodGroup
from kai_ray.api.queue import Queue
from kai_ray.api.storage import ConfigMap, PersistentVolume, PersistentVolumeClaim, StorageClass
from kai_ray.api.topology import Topology

ApiObject = (
    Queue
    | PodGroup
    | BindRequest
    | Topology
    | Pod
    | Node
    | Namespace
    | PriorityClass
    | PersistentVolumeClaim
    | PersistentVolume
    | StorageClass
    | ConfigMap
)
ObjectT = TypeVar("ObjectT", bound=ApiObject)

_MODELS: dict[str, type[ApiObject]] = {
    model.model_fields["kind"].default: model
    for model in (
        Queue,
        PodGroup,
        BindRequest,
        Topology,
        Pod,
        Node,
        Namespace,
        PriorityClass,
        PersistentVolumeClaim,
        PersistentVolume,
        StorageClass,
        ConfigMap,
    )
}
_NAMESPACED = frozenset({"Pod", "PodGroup", "BindRequest", "PersistentVolumeClaim", "ConfigMap"})
MODEL_KINDS: frozenset[str] = frozenset(_MODELS)
"""The kinds the loader turns into models; any other kind is reported as unsupported."""
NAMESPACED_MODEL_KINDS: frozenset[str] = _NAMESPACED
_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class ManifestProblem:
    """One thing wrong with the manifests, precise enough to fix without searching."""

    file: str
    kind: str = ""
    namespace: str = ""
    name: str = ""
    field: str = ""
    message: str = ""
    line: int | None = None
    warning: bool = False
    """Worth saying, but nothing was skipped (the podgrouper grouped the pod all the same)."""
    reason: str = ""
    """What a warning is, in one CamelCase word for the Event and condition that say it on the
    object (``PriorityClassNotFound``); empty for a problem that skips its object."""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        parts = [where, self._object(), self.field, self.message]
        return ": ".join(part for part in parts if part)

    def detail(self) -> str:
        """The field and what is wrong with it, without file and object (which an Event or
        condition on the object already names)."""
        return ": ".join(part for part in (self.field, self.message) if part)

    def _object(self) -> str:
        if not self.kind or not self.name:
            return self.kind
        return "/".join(part for part in (self.kind, self.namespace, self.name) if part)


@dataclass(frozen=True)
class Manifest(Generic[ObjectT]):
    """A loaded object with where it came from; `position` is its order of appearance."""

    file: str
    line: int
    position: int
    obj: ObjectT

    def problem(self, field: str, message: str) -> ManifestProblem:
        """A problem about this object, for checks made after loading."""
        meta = self.obj.metadata
        return ManifestProblem(self.file, self.obj.kind, meta.namespace or "", meta.name, field, message)


@dataclass(frozen=True)
class SourcedObject:
    """A parsed object not yet checked against a model, with where it came from.

    What a step between reading and loading works on (the simulator's workload
    expansion and podgrouper): objects it creates carry their workload's place,
    so a problem with a generated pod still points at the file to fix.
    """

    file: str
    line: int
    data: Any


@dataclass
class ManifestSet:
    manifests: list[Manifest[ApiObject]] = field(default_factory=list)
    problems: list[ManifestProblem] = field(default_factory=list)

    def of_type(self, cls: type[ObjectT]) -> list[Manifest[ObjectT]]:
        """The loaded objects of one model class, in order of appearance: the very entries (they
        are frozen), not copies; a cycle asks this seven times of every object it converts."""
        return [cast("Manifest[ObjectT]", item) for item in self.manifests if isinstance(item.obj, cls)]


def load_manifests(path: str | Path) -> ManifestSet:
    """Load one YAML file, or every *.yaml / *.yml below a directory in sorted path order."""
    documents, problems = read_manifest_documents(path)
    loaded = load_sourced_objects(documents)
    loaded.problems[:0] = problems
    return loaded


def read_manifest_documents(path: str | Path) -> tuple[list[SourcedObject], list[ManifestProblem]]:
    """Every object of the YAML file or directory, parsed but not validated, and what could not be read."""
    problems: list[ManifestProblem] = []
    documents: list[SourcedObject] = []
    root = Path(path)
    if not root.exists():
        problems.append(ManifestProblem(str(root), message="no such file or directory"))
    for file in _manifest_files(root):
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            problems.append(ManifestProblem(str(file), message=f"cannot read: {error}"))
            continue
        documents.extend(_read_text(text, str(file), problems))
    return documents, problems


def read_manifest_text(
    text: str, file: str = "<string>"
) -> tuple[list[SourcedObject], list[ManifestProblem]]:
    """Every object of a YAML string, parsed but not validated, and its syntax errors."""
    problems: list[ManifestProblem] = []
    return list(_read_text(text, file, problems)), problems


def load_sourced_objects(objects: Iterable[SourcedObject]) -> ManifestSet:
    """Validate objects read earlier (`read_manifest_documents`), keeping where each came from."""
    loader = _Loader()
    for sourced in objects:
        loader._load_object(sourced.data, sourced.file, sourced.line)
    return loader.result


def load_manifest_text(text: str, file: str = "<string>") -> ManifestSet:
    """Load manifests from a string; `file` is the name problems will carry."""
    loader = _Loader()
    loader.load_text(text, file)
    return loader.result


def load_manifest_objects(objects: Iterable[Any], file: str) -> ManifestSet:
    """Load already parsed objects (e.g. dicts read from an API server); `file` names their source.

    Same checks and problems as for YAML text, without a YAML round trip, so a
    backend holding thousands of objects in memory pays only for validation.
    """
    loader = _Loader()
    for data in objects:
        loader._load_object(data, file, 0)  # line 0: the source has no line numbers
    return loader.result


def _manifest_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    if not root.is_dir():
        return []
    found = (p for p in root.rglob("*") if p.suffix in _SUFFIXES and p.is_file())
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


_Key = tuple[str, str, str]
_ProblemAt = Callable[[str, str], ManifestProblem]


def validate_object(data: Any, file: str, line: int = 0) -> tuple[ApiObject | None, list[ManifestProblem]]:
    """One parsed object checked against its model: the model, or None and why not.

    Apart from `ManifestCollector` so that a reader holding objects across cycles validates
    each version once (`kai_ray.cluster.kube.models`) and still collects like the loader.
    """
    problems: list[ManifestProblem] = []
    if not isinstance(data, dict):
        message = f"expected a Kubernetes object (a mapping), got {type(data).__name__}"
        return None, [ManifestProblem(file, message=message, line=line)]
    kind, namespace, name = _identity(data)

    def problem(field: str, message: str) -> ManifestProblem:
        return ManifestProblem(file, kind, namespace, name, field, message)

    return _validate(data, kind, problem, problems), problems


class ManifestCollector:
    """Validated objects gathered into a `ManifestSet` in order, a second object of the same
    kind, namespace and name refused as a problem (the first is kept)."""

    def __init__(self) -> None:
        self.result = ManifestSet()
        self._seen: dict[_Key, Manifest[ApiObject]] = {}

    def add(self, obj: ApiObject, file: str, line: int = 0) -> None:
        first = self._seen.get(_key(obj))
        if first is not None:
            message = f"defined twice; keeping the one from {first.file}"
            meta = obj.metadata
            self.result.problems.append(
                ManifestProblem(file, obj.kind, meta.namespace or "", meta.name, "metadata.name", message)
            )
            return
        manifest: Manifest[ApiObject] = Manifest(file, line, len(self.result.manifests), obj)
        self._seen[_key(obj)] = manifest
        self.result.manifests.append(manifest)


class _Loader(ManifestCollector):
    """Accumulates objects and problems over many files, remembering keys to catch duplicates."""

    def load_text(self, text: str, file: str) -> None:
        for sourced in _read_text(text, file, self.result.problems):
            self._load_object(sourced.data, sourced.file, sourced.line)

    def _load_object(self, data: Any, file: str, line: int) -> None:
        obj, problems = validate_object(data, file, line)
        self.result.problems.extend(problems)
        if obj is not None:
            self.add(obj, file, line)


def _read_text(text: str, file: str, problems: list[ManifestProblem]) -> Iterator[SourcedObject]:
    for document in parse_documents(text):
        if isinstance(document, YamlSyntaxError):
            problems.append(ManifestProblem(file, message=document.message, line=document.line))
            continue
        for data in _items(document.data):
            yield SourcedObject(file, document.line, data)


def _items(data: Any) -> Iterator[Any]:
    """The objects of a document, unwrapping `kind: List` as `kubectl get -o yaml` writes it."""
    if isinstance(data, dict) and data.get("kind") == "List" and isinstance(data.get("items"), list):
        yield from data["items"]
    else:
        yield data


def _identity(data: dict[str, Any]) -> tuple[str, str, str]:
    """Kind, namespace and name read defensively, so even invalid objects can be named."""
    kind = data.get("kind")
    meta = data.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name, namespace = meta.get("name"), meta.get("namespace")
    kind = kind if isinstance(kind, str) else ""
    namespace = namespace if isinstance(namespace, str) else DEFAULT_NAMESPACE
    return (
        kind,
        namespace if kind in _NAMESPACED else "",
        name if isinstance(name, str) else "",
    )


def _validate(
    data: dict[str, Any], kind: str, problem: _ProblemAt, problems: list[ManifestProblem]
) -> ApiObject | None:
    model = _model_for(data, kind)
    if isinstance(model, tuple):
        problems.append(problem(*model))
        return None
    try:
        obj = model.model_validate(data)
    except ValidationError as error:
        problems.extend(problem(path, message) for path, message in describe_errors(error, model))
        return None
    obj.metadata.namespace = (obj.metadata.namespace or DEFAULT_NAMESPACE) if kind in _NAMESPACED else None
    return obj


def _model_for(data: dict[str, Any], kind: str) -> type[ApiObject] | tuple[str, str]:
    """The model for `kind`, or the `(field, message)` saying why there is none."""
    if not kind:
        return "kind", "required field is missing" if "kind" not in data else "must be a string"
    model = _MODELS.get(kind)
    if model is None:
        return "kind", f"unsupported kind {kind!r}" + suggest(kind, _MODELS)
    expected = model.model_fields["api_version"].default
    if data.get("apiVersion") != expected:
        return "apiVersion", f"{kind} is served as {expected}, got {data.get('apiVersion')!r}"
    return model


def _key(obj: ApiObject) -> _Key:
    return obj.kind, obj.metadata.namespace or "", obj.metadata.name
