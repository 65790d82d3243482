"""Requests made from what a user has: a workload id typed on a command line, a YAML or JSON
file in the API's own form, or ordinary Kubernetes manifests submitted as one workload."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from kai_ray.rpc.client import SchedulerClient
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.v1 import scheduler_pb2 as pb

__all__ = [
    "is_manifest_document",
    "load_documents",
    "manifests_request",
    "parse_id",
    "request_from_dict",
    "submit_manifests",
    "workload_spec_from_yaml",
]

_M = TypeVar("_M", bound=Message)


def parse_id(text: str) -> str:
    """Check a workload id, NAMESPACE/NAME, before a round trip is spent on a typo."""
    namespace, slash, name = text.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise ServiceError(ErrorCode.INVALID_ARGUMENT, f"expected NAMESPACE/NAME, got {text!r}", "id")
    return text


def _invalid(path: str, message: str) -> ServiceError:
    return ServiceError(ErrorCode.INVALID_ARGUMENT, message, path or None)


def _scalar(field: Any, value: Any, path: str) -> Any:
    """A YAML scalar as ``field`` wants it; numbers become quantity strings (`cpu: 4`), as YAML
    makes numbers of what Kubernetes users write as quantities."""
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise _invalid(path, f"expected a string, got {value!r}")
        return str(value)
    if kind == FieldDescriptor.TYPE_BOOL:
        if not isinstance(value, bool):
            raise _invalid(path, f"expected true or false, got {value!r}")
        return value
    if kind == FieldDescriptor.TYPE_ENUM:
        enum = field.enum_type
        assert enum is not None
        names = [v.name for v in enum.values if v.number != 0]
        if not isinstance(value, str):
            raise _invalid(path, f"expected one of {', '.join(names)}, got {value!r}")
        spelled = value.upper().replace("-", "_")
        if spelled not in enum.values_by_name:
            raise _invalid(path, f"expected one of {', '.join(names)}, got {value!r}")
        return enum.values_by_name[spelled].number
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _invalid(path, f"expected a number, got {value!r}")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(path, f"expected an integer, got {value!r}")
    return value


def _fill(message: Message, data: Any, path: str) -> None:
    """Copy ``data`` (parsed YAML) into ``message``, naming the exact field of any mistake.

    Keys are the proto field names or their JSON (camelCase) spelling; paths in errors use the
    proto names, as the server's do (`workload.pod_sets[0].template.requests["cpu"]`)."""
    if not isinstance(data, Mapping):
        raise _invalid(path, f"expected a mapping, got {data!r}")
    descriptor = message.DESCRIPTOR
    by_json = {f.json_name: f for f in descriptor.fields}
    for key, value in data.items():
        field = descriptor.fields_by_name.get(str(key)) or by_json.get(str(key))
        if field is None:
            known = ", ".join(f.json_name for f in descriptor.fields)
            where = f"{path}.{key}" if path else str(key)
            raise _invalid(where, f"unknown field (known here: {known})")
        where = f"{path}.{field.name}" if path else field.name
        if value is None:
            continue
        target = getattr(message, field.name)
        message_type = field.message_type
        if message_type is not None and message_type.GetOptions().map_entry:
            if not isinstance(value, Mapping):
                raise _invalid(where, f"expected a mapping, got {value!r}")
            value_field = message_type.fields_by_name["value"]
            for entry_key, entry_value in value.items():
                entry_path = f'{where}["{entry_key}"]'
                if value_field.message_type is not None:
                    _fill(target[str(entry_key)], entry_value, entry_path)
                else:
                    target[str(entry_key)] = _scalar(value_field, entry_value, entry_path)
        elif field.is_repeated:
            if not isinstance(value, list):
                raise _invalid(where, f"expected a list, got {value!r}")
            for index, item in enumerate(value):
                item_path = f"{where}[{index}]"
                if message_type is not None:
                    _fill(target.add(), item, item_path)
                else:
                    target.append(_scalar(field, item, item_path))
        elif message_type is not None:
            _fill(target, value, where)
            if not value:
                # An empty mapping still selects a oneof member (`manifests: {}`).
                target.SetInParent()
        else:
            setattr(message, field.name, _scalar(field, value, where))


def request_from_dict(data: Any, message: _M) -> _M:
    """Fill ``message`` from parsed YAML/JSON; a mistake raises INVALID_ARGUMENT naming the field."""
    _fill(message, data, "")
    return message


def load_documents(path: Path) -> list[Any]:
    """Every YAML document of a file (JSON is YAML too), empty ones dropped."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ServiceError(ErrorCode.INVALID_ARGUMENT, f"{path}: {exc.strerror}", "file") from None
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ServiceError(ErrorCode.INVALID_ARGUMENT, f"{path}: not YAML: {exc}", "file") from None


def is_manifest_document(document: Any) -> bool:
    """A Kubernetes object (it has `apiVersion` and `kind`), as opposed to a workload spec."""
    return isinstance(document, Mapping) and "apiVersion" in document and "kind" in document


def workload_spec_from_yaml(source: Path | str) -> list[pb.SubmitWorkloadRequest]:
    """The submit requests in a workload spec file (one per YAML document).

    A document is a `SubmitWorkloadRequest` (proto/kai_ray/v1/scheduler.proto), keys spelled as the
    proto fields or in camelCase, enums by name in any case, quantities as strings or numbers::

        namespace: team-a
        name: train                   # optional: from the first pod set
        workload:
          queue: team-a
          priorityClass: train        # optional
          preemptibility: preemptible # or non-preemptible; default: from the priority class
          minAvailable: 2             # the gang; 0 or absent: all pods
          podSets:
            - name: worker
              replicas: 2
              template:
                requests: {cpu: 4, memory: 16Gi, nvidia.com/gpu: 1}
                nodeSelector: {kai.scheduler/node-pool: a100}

    ``source`` is a file, or the YAML text itself."""
    if isinstance(source, Path):
        documents = load_documents(source)
        where = f"{source}: "
    else:
        try:
            documents = [d for d in yaml.safe_load_all(source) if d is not None]
        except yaml.YAMLError as exc:
            raise ServiceError(ErrorCode.INVALID_ARGUMENT, f"not YAML: {exc}", "file") from None
        where = ""
    if not documents:
        raise ServiceError(ErrorCode.INVALID_ARGUMENT, f"{where}no workload in it", "file")
    requests = []
    for index, document in enumerate(documents):
        if is_manifest_document(document):
            raise ServiceError(
                ErrorCode.INVALID_ARGUMENT,
                f"{where}document {index + 1} is a Kubernetes {document['kind']}, not a workload spec",
                "file",
            )
        try:
            requests.append(request_from_dict(document, pb.SubmitWorkloadRequest()))
        except ServiceError as exc:
            raise ServiceError(exc.code, f"{where}{exc.message}", exc.field) from None
    return requests


def manifests_request(
    documents: Sequence[Any], namespace: str | None = None, name: str | None = None
) -> pb.SubmitWorkloadRequest:
    """One submit of Kubernetes manifests; the namespace defaults to the one they all name."""
    if not documents:
        raise ServiceError(ErrorCode.INVALID_ARGUMENT, "no Kubernetes manifests", "manifests.documents")
    if namespace is None:
        named = {
            str(d.get("metadata", {}).get("namespace"))
            for d in documents
            if isinstance(d, Mapping)
            and isinstance(d.get("metadata"), Mapping)
            and d["metadata"].get("namespace")
        }
        if len(named) != 1:
            found = ", ".join(sorted(named)) or "none"
            raise ServiceError(
                ErrorCode.INVALID_ARGUMENT,
                f"the manifests must name exactly one namespace (found: {found}); give it explicitly",
                "namespace",
            )
        namespace = named.pop()
    text = [yaml.safe_dump(d, sort_keys=False) for d in documents]
    return pb.SubmitWorkloadRequest(
        namespace=namespace, name=name or "", manifests=pb.Manifests(documents=text)
    )


def submit_manifests(
    client: SchedulerClient, namespace: str | None, paths: Iterable[Path]
) -> list[pb.SubmitWorkloadResponse]:
    """Submit each file of Kubernetes manifests as one workload (a RayJob and its ConfigMap, a
    PyTorchJob...); stops at the first refusal, which is raised."""
    return [client.submit_workload(manifests_request(load_documents(path), namespace)) for path in paths]
