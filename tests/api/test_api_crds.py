"""The CRDs in charts/kai-ray/crds are generated from the models and stay compatible with KAI's.

Two promises are checked here without a cluster (tests/kube/test_kube_crds.py checks them on a
real API server):

* the committed files are exactly what `make crds` writes, so nobody hand-edits them and a
  model change cannot ship without its CRD;
* every field of KAI's own CRDs (../shared/crds/kai) exists in ours with a compatible type and
  the same default, and ours validates no more strictly than KAI's, except where listed below
  with the reason. The reverse holds too: kai-ray writes no field that KAI's CRDs would prune.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from pydantic import BaseModel, Field

from kai_ray.api import crds
from kai_ray.api.crds import CRDS, CrdSchemaError, CrdSpec

pytestmark = pytest.mark.unit

REPO_ROOT = Path(__file__).resolve().parents[2]
OURS_DIR = REPO_ROOT / "charts" / "kai-ray" / "crds"
UPSTREAM_DIR = REPO_ROOT.parent / "shared" / "crds" / "kai"
REGENERATE = "run `make crds` and commit charts/kai-ray/crds"

SPECS = {spec.kind: spec for spec in CRDS}

# Deliberate differences from KAI's CRDs: (kind, field path, check) -> why.
# A difference not listed fails the test; so does a listed one that no longer occurs, so this
# table is always the complete, current list.
EXCEPTIONS: dict[tuple[str, str, str], str] = {
    ("Queue", "<root>", "stricter:required"): (
        "spec is required: KAI's queue webhook rejects a Queue without spec.resources, and kai-ray "
        "runs no webhook, so the CRD enforces it"
    ),
    ("Queue", "spec", "stricter:required"): "spec.resources is required, for the same reason",
    ("BindRequest", "spec.receivedResourceType", "stricter:enum"): (
        "the four values KAI's scheduler writes ('', Regular, Fraction, MigInstance); anything else "
        "is a bug the binder could not act on, better refused at the API server"
    ),
    ("BindRequest", "status.phase", "stricter:enum"): (
        "the phases of the BindRequest contract ('', Pending, Succeeded, Failed), same reasoning"
    ),
    **{
        ("BindRequest", f"spec.{claim}.allocation.devices.results[].tolerations[].operator", "default"): (
            "DRA allocation results are passed through opaquely (x-kubernetes-preserve-unknown-fields); "
            "they are copies of ResourceClaim.status.allocation, which the core API server has "
            "already defaulted (operator: Equal)"
        )
        for claim in ("resourceClaimAllocations[]", "extendedResourceClaimAllocation")
    },
    **{
        (
            "BindRequest",
            f"spec.extendedResourceClaimAllocation.deviceRequests[].{request}.tolerations[].operator",
            "default",
        ): (
            "the extended-resource device requests are likewise an opaque copy of an already "
            "defaulted resource.k8s.io object"
        )
        for request in ("exactly", "firstAvailable[]")
    },
}

# Fields kai-ray's CRDs have and KAI's do not (KAI's API server would prune them): path -> why.
EXTRA_FIELDS: dict[tuple[str, str], str] = {}


# --------------------------------------------------------------------------------------------
# Helpers


def load_crd(path: Path) -> dict[str, Any]:
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert len(docs) == 1, f"{path}: expected one CustomResourceDefinition, found {len(docs)} documents"
    doc: dict[str, Any] = docs[0]
    assert doc["kind"] == "CustomResourceDefinition"
    return doc


def upstream(kind: str) -> dict[str, Any]:
    if not UPSTREAM_DIR.is_dir():
        pytest.skip(f"KAI's reference CRDs are not at {UPSTREAM_DIR}")
    return load_crd(UPSTREAM_DIR / SPECS[kind].file_name)


def root_schema(crd: Mapping[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def is_opaque(node: Mapping[str, Any]) -> bool:
    """Accepts any content below: preserve-unknown-fields without a declared structure."""
    return bool(node.get("x-kubernetes-preserve-unknown-fields")) and not any(
        key in node for key in ("properties", "additionalProperties", "items")
    )


def type_of(node: Mapping[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "int-or-string"
    return str(node.get("type", "any"))


def compatible(theirs: str, ours: str) -> bool:
    """Ours accepts everything theirs does: the same type, or a broader one."""
    return (
        ours == theirs
        or ours == "any"
        or (ours == "int-or-string" and theirs in ("integer", "string"))
        or (ours == "number" and theirs == "integer")
    )


def join(path: str, name: str) -> str:
    return name if path == "<root>" else f"{path}.{name}"


def defaults_under(node: Mapping[str, Any], path: str) -> Iterator[str]:
    if "default" in node:
        yield path
    for name, child in node.get("properties", {}).items():
        yield from defaults_under(child, join(path, name))
    if isinstance(node.get("additionalProperties"), Mapping):
        yield from defaults_under(node["additionalProperties"], f"{path}{{}}")
    if "items" in node:
        yield from defaults_under(node["items"], f"{path}[]")


LOWER_BOUNDS = ("minimum", "minLength", "minItems", "minProperties")
UPPER_BOUNDS = ("maximum", "maxLength", "maxItems", "maxProperties")


def stricter(theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> Iterator[str]:
    """The validation keywords on which ours would refuse a value theirs accepts."""
    if "enum" in ours and ("enum" not in theirs or not set(theirs["enum"]) <= set(ours["enum"])):
        yield "enum"
    if "pattern" in ours and ours["pattern"] != theirs.get("pattern"):
        yield "pattern"
    if "format" in ours and ours["format"] != theirs.get("format"):
        yield "format"
    for key in LOWER_BOUNDS:
        if key in ours and (key not in theirs or ours[key] > theirs[key]):
            yield key
    for key in UPPER_BOUNDS:
        if key in ours and (key not in theirs or ours[key] < theirs[key]):
            yield key
    if set(ours.get("required", ())) - set(theirs.get("required", ())):
        yield "required"
    their_rules = {rule["rule"] for rule in theirs.get("x-kubernetes-validations", ())}
    if any(rule["rule"] not in their_rules for rule in ours.get("x-kubernetes-validations", ())):
        yield "cel"


def differences(
    kind: str, theirs: Mapping[str, Any], ours: Mapping[str, Any] | None, path: str
) -> Iterator[tuple[str, str]]:
    """(path, check) for every way `ours` fails to be a drop-in for `theirs`, recursively."""
    if ours is None:
        yield path, "missing"
        return
    if is_opaque(ours) and ours.get("type", theirs.get("type")) == theirs.get("type"):
        # Anything is accepted below, so types cannot clash; only server-side defaults are lost.
        for default_path in defaults_under(theirs, path):
            yield default_path, "default"
        return
    if not compatible(type_of(theirs), type_of(ours)):
        yield path, f"type:{type_of(theirs)}->{type_of(ours)}"
        return
    if "default" in theirs and ours.get("default") != theirs["default"]:
        yield path, "default"
    for check in stricter(theirs, ours):
        yield path, f"stricter:{check}"
    their_rules = [rule["rule"] for rule in theirs.get("x-kubernetes-validations", ())]
    our_rules = {rule["rule"] for rule in ours.get("x-kubernetes-validations", ())}
    if any(rule not in our_rules for rule in their_rules):
        yield path, "cel-missing"
    for key in ("x-kubernetes-list-type", "x-kubernetes-map-type"):
        if key in theirs and ours.get(key) != theirs[key]:
            yield path, key
    our_properties = ours.get("properties", {})
    for name, child in theirs.get("properties", {}).items():
        yield from differences(kind, child, our_properties.get(name), join(path, name))
    if isinstance(theirs.get("additionalProperties"), Mapping):
        yield from differences(
            kind, theirs["additionalProperties"], ours.get("additionalProperties"), f"{path}{{}}"
        )
    if "items" in theirs:
        yield from differences(kind, theirs["items"], ours.get("items"), f"{path}[]")


def spec_and_status(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The root schema with only the parts KAI defines (apiVersion/kind/metadata are standard)."""
    properties = {
        name: schema["properties"][name] for name in ("spec", "status") if name in schema["properties"]
    }
    return {**schema, "properties": properties}


def field_paths(node: Mapping[str, Any], path: str = "<root>") -> Iterator[str]:
    """Every field path of a schema, not descending into opaque (preserve-unknown) parts."""
    for name, child in node.get("properties", {}).items():
        child_path = join(path, name)
        yield child_path
        if not is_opaque(child):
            yield from field_paths(child, child_path)
    if isinstance(node.get("additionalProperties"), Mapping):
        yield from field_paths(node["additionalProperties"], f"{path}{{}}")
    if "items" in node:
        yield from field_paths(node["items"], f"{path}[]")


def opaque_prefixes(node: Mapping[str, Any], path: str = "<root>") -> Iterator[str]:
    for name, child in node.get("properties", {}).items():
        child_path = join(path, name)
        if is_opaque(child):
            yield child_path
        else:
            yield from opaque_prefixes(child, child_path)
    if "items" in node:
        yield from opaque_prefixes(node["items"], f"{path}[]")


# --------------------------------------------------------------------------------------------
# The committed files are what the models generate


@pytest.mark.parametrize("spec", CRDS, ids=[spec.kind for spec in CRDS])
def test_committed_crd_matches_the_models(spec: CrdSpec) -> None:
    path = OURS_DIR / spec.file_name
    assert path.is_file(), f"{path} is missing: {REGENERATE}"
    assert path.read_text() == crds.render(spec), (
        f"{path} differs from what kai_ray/api generates: {REGENERATE}"
    )


def test_no_stale_crd_files() -> None:
    stale = crds.stale_files(OURS_DIR)
    assert not stale, f"not generated by kai_ray.api.crds (a removed or renamed kind?): {stale}; {REGENERATE}"


def test_check_mode_reports_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--check` is what CI or a pre-commit hook can run; it must notice edits, gaps and leftovers."""
    crds.generate(tmp_path)
    assert crds.main([str(tmp_path), "--check"]) == 0
    queue_file = tmp_path / SPECS["Queue"].file_name
    queue_file.write_text(queue_file.read_text().replace("default: 100", "default: 101"))
    (tmp_path / SPECS["Topology"].file_name).unlink()
    (tmp_path / "old.yaml").write_text("{}\n")
    assert crds.main([str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert "differs" in err and "missing" in err and "old.yaml" in err and "make crds" in err


def test_generation_is_deterministic_and_idempotent(tmp_path: Path) -> None:
    first = [path.read_text() for path in crds.generate(tmp_path)]
    second = [path.read_text() for path in crds.generate(tmp_path)]
    assert first == second == [crds.render(spec) for spec in CRDS]


# --------------------------------------------------------------------------------------------
# The generated schemas are structural (the API server refuses anything else)


def walk(node: Any, path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    if isinstance(node, Mapping):
        yield path, node
        for key, value in node.get("properties", {}).items():
            yield from walk(value, f"{path}.{key}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), Mapping):
                yield from walk(node[key], f"{path}[{key}]")


@pytest.mark.parametrize("spec", CRDS, ids=[spec.kind for spec in CRDS])
def test_schema_is_structural(spec: CrdSpec) -> None:
    allowed_anyof = [{"type": "integer"}, {"type": "string"}]
    for path, node in walk(crds.openapi_schema(spec)):
        assert not {"$ref", "$defs", "title", "const", "allOf", "oneOf"} & set(node), path
        assert node.get("type") != "null", path
        assert (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        ), f"{path}: a structural schema needs a type"
        assert not ("properties" in node and "additionalProperties" in node), path
        if "anyOf" in node:
            assert node["anyOf"] == allowed_anyof and node.get("x-kubernetes-int-or-string"), path
        if "default" in node:
            assert node["default"] is not None, path


def test_model_defaults_become_server_defaults() -> None:
    spec = root_schema(crds.crd_manifest(SPECS["Queue"]))["properties"]["spec"]
    assert spec["properties"]["priority"]["default"] == 100
    # Zero values are what an absent field means anyway; the server does not write them.
    assert "default" not in spec["properties"]["resources"]["properties"]["gpu"]["properties"]["limit"]
    assert "default" not in spec["properties"]["parentQueue"]
    # Optional fields are simply absent when unset (no null default, no nullable).
    assert "default" not in spec["properties"]["preemptMinRuntime"]
    assert "nullable" not in spec["properties"]["preemptMinRuntime"]


class _Recursive(BaseModel):
    children: list[_Recursive] = Field(default_factory=list)


class _Union(BaseModel):
    value: int | list[str] = 0


class _Opaque(BaseModel):
    payload: Any = None
    labels: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    ratio: Annotated[float, Field(gt=0)] = 1.0


def _spec_for(model: type[BaseModel]) -> CrdSpec:
    return CrdSpec(
        model=model,
        api_version="example.com/v1",
        kind="Example",
        plural="examples",
        scope="Cluster",
        description="x",
    )


@pytest.mark.parametrize(("model", "message"), [(_Recursive, "recursive"), (_Union, "union of 2")])
def test_untranslatable_models_fail_loudly(model: type[BaseModel], message: str) -> None:
    """A construct with no structural equivalent must stop `make crds`, not ship a broken CRD."""
    with pytest.raises(CrdSchemaError, match=message):
        crds.openapi_schema(_spec_for(model))


def test_any_maps_and_exclusive_bounds_translate() -> None:
    properties = crds.openapi_schema(_spec_for(_Opaque))["properties"]
    assert properties["payload"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert properties["labels"] == {
        "additionalProperties": {"minimum": 1, "type": "integer"},
        "type": "object",
    }
    # JSON Schema 2020-12 `exclusiveMinimum: 0` is OpenAPI v3.0 `minimum: 0, exclusiveMinimum: true`.
    assert properties["ratio"] == {"default": 1.0, "exclusiveMinimum": True, "minimum": 0, "type": "number"}


# --------------------------------------------------------------------------------------------
# Compatibility with KAI's CRDs


@pytest.mark.parametrize("spec", CRDS, ids=[spec.kind for spec in CRDS])
def test_names_scope_and_versions_match_kai(spec: CrdSpec) -> None:
    theirs, ours = upstream(spec.kind), crds.crd_manifest(spec)
    assert ours["metadata"]["name"] == theirs["metadata"]["name"]
    for key in ("group", "names", "scope"):
        assert ours["spec"][key] == theirs["spec"][key], key
    (their_version,) = theirs["spec"]["versions"]
    (our_version,) = ours["spec"]["versions"]
    for key in ("name", "served", "storage", "subresources", "additionalPrinterColumns"):
        assert our_version.get(key) == their_version.get(key), key


def all_differences() -> set[tuple[str, str, str]]:
    found: set[tuple[str, str, str]] = set()
    for spec in CRDS:
        theirs = spec_and_status(root_schema(upstream(spec.kind)))
        ours = spec_and_status(root_schema(crds.crd_manifest(spec)))
        found |= {(spec.kind, path, check) for path, check in differences(spec.kind, theirs, ours, "<root>")}
    return found


def test_every_kai_field_exists_with_a_compatible_type_and_default() -> None:
    found = all_differences()
    unexpected = sorted(found - set(EXCEPTIONS))
    assert not unexpected, (
        "incompatible with KAI's CRDs (fix the model, or list with a reason):\n"
        + "\n".join(f"  {kind} {path}: {check}" for kind, path, check in unexpected)
    )


def test_every_listed_exception_still_applies() -> None:
    stale = sorted(set(EXCEPTIONS) - all_differences())
    assert not stale, f"no longer differs from KAI, remove from EXCEPTIONS: {stale}"


def test_we_write_no_field_kai_would_prune() -> None:
    """Objects kai-ray writes must survive KAI's own CRDs too (e.g. a cluster that has them installed)."""
    extra: set[tuple[str, str]] = set()
    for spec in CRDS:
        theirs = spec_and_status(root_schema(upstream(spec.kind)))
        ours = spec_and_status(root_schema(crds.crd_manifest(spec)))
        opaque = tuple(opaque_prefixes(theirs))
        their_paths = set(field_paths(theirs))
        for path in field_paths(ours):
            if path not in their_paths and not path.startswith(opaque):
                extra.add((spec.kind, path))
    assert extra == set(EXTRA_FIELDS), f"fields KAI's CRDs do not have: {sorted(extra - set(EXTRA_FIELDS))}"


def test_the_comparison_notices_breaking_changes() -> None:
    """Guard the guard: a dropped field, a narrowed type, a lost default and a new constraint are caught."""
    theirs = spec_and_status(root_schema(upstream("Queue")))
    ours = copy.deepcopy(spec_and_status(root_schema(crds.crd_manifest(SPECS["Queue"]))))
    status = ours["properties"]["status"]["properties"]
    del status["conditions"]["items"]["properties"]["lastProbeTime"]
    status["allocated"]["additionalProperties"] = {"type": "string"}
    gpu = ours["properties"]["spec"]["properties"]["resources"]["properties"]["gpu"]["properties"]
    gpu["quota"] = {"type": "integer", "minimum": 0}
    theirs = copy.deepcopy(theirs)
    theirs["properties"]["spec"]["properties"]["parentQueue"]["default"] = "root"
    found = set(differences("Queue", theirs, ours, "<root>"))
    assert {
        ("status.conditions[].lastProbeTime", "missing"),
        ("status.allocated{}", "type:int-or-string->string"),
        ("spec.resources.gpu.quota", "type:number->integer"),
        ("spec.parentQueue", "default"),
    } <= found
