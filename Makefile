# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint conformance clean kube-bins crds proto devcluster devcluster-down image

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/kai-ray simulate examples/quickstart

# kube-apiserver, kube-controller-manager, etcd (+ kwok), KubeRay's ray-operator, the Kubeflow
# training-operator, helm and grpcurl for the Kubernetes, chart and gRPC tests, built from their Go
# modules into ~/.cache/kai-ray/k8s-test-bin once (cold: roughly 18 min on 2 cores, 4-6 of them for
# the operators, 3 for helm, under 1 for kube-controller-manager; then a no-op).
kube-bins:
	bash kai_ray/devcluster/toolchain/build-bins.sh
	bash kai_ray/devcluster/toolchain/build-operators.sh
	bash kai_ray/devcluster/toolchain/build-helm.sh
	bash kai_ray/devcluster/toolchain/build-grpcurl.sh

test: $(STAMP) kube-bins
	$(BIN)/python -m pytest

# Everything that needs no Go-built binary (unit, conformance, grouping, gRPC on the simulated
# cluster, Ray in process): a few minutes warm, for the loop of a change; `make test` before a commit.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not kube and not gobin and not image"

# CustomResourceDefinitions generated from the pydantic models in kai_ray/api; commit the result
# (tests/api/test_api_crds.py fails when the committed files drift from the models).
crds: $(STAMP)
	$(BIN)/python -m kai_ray.api.crds charts/kai-ray/crds

# The gRPC API's Python code, generated from proto/ (commit the result; tests/rpc/test_proto_drift.py
# fails when the committed files drift from the .proto files or from this grpcio-tools).
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. --grpc_python_out=. \
	    proto/kai_ray/v1/scheduler.proto

# A local kube-apiserver + etcd + kwok with 4 fake 8-GPU nodes; kubeconfig in .devcluster/kubeconfig.
devcluster: $(STAMP) kube-bins
	$(BIN)/kai-ray devcluster up --dir .devcluster --nodes 4

devcluster-down: $(STAMP)
	$(BIN)/kai-ray devcluster down --dir .devcluster

# The container image (see the Dockerfile), kai-ray:<version>, built with the first of podman, buildah
# and docker on PATH (or IMAGE_BUILDER=...).  IMAGE_BASE replaces the python:3.11-slim-bookworm base
# (a mirror of it, or a local image where no registry is reachable); PIP_CA is the CA bundle pip
# needs behind a TLS-intercepting proxy (default: $PIP_CERT).  buildah gets --layers, the default
# of podman and docker, so a rebuild reuses the dependency layer.
IMAGE_VERSION = $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= kai-ray:$(IMAGE_VERSION)
IMAGE_BASE ?=
IMAGE_BUILDER ?= $(firstword $(foreach b,podman buildah docker,$(shell command -v $(b))))
PIP_CA ?= $(PIP_CERT)
image:
	@test -n '$(IMAGE_BUILDER)' || { echo 'make image: install podman, buildah or docker' >&2; exit 1; }
	ca='$(PIP_CA)'; $(IMAGE_BUILDER) build $(if $(filter buildah,$(notdir $(IMAGE_BUILDER))),--layers) \
	    $(if $(IMAGE_BASE),--build-arg BASE=$(IMAGE_BASE)) $${ca:+--secret id=pip-ca,src="$$ca"} \
	    --build-arg VERSION=$(IMAGE_VERSION) \
	    --build-arg REVISION="$$(git rev-parse HEAD 2>/dev/null)" --tag $(IMAGE) .

lint: $(STAMP)
	$(BIN)/ruff check kai_ray tests operators
	$(BIN)/ruff format --check kai_ray tests operators
	$(BIN)/mypy kai_ray operators/kai_ray_operators

conformance: $(STAMP)
	$(PYTHON) ../shared/conformance/check.py ../shared/conformance/scenarios \
	    --cmd '$(BIN)/kai-ray simulate {scenario} --output json' --jobs 2
	$(PYTHON) ../shared/conformance/grouping/check.py ../shared/conformance/grouping/cases \
	    --cmd '$(BIN)/kai-ray group {case} --output json' --jobs 2

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
