# The kai-ray image: the `kai-ray` command in a virtual environment on a slim Python base, run as
# a non-root user.  `make image` builds it with podman, buildah or docker (the first one found).
#
#   make image                                   # kai-ray:<version from pyproject.toml>
#   make image IMAGE_BASE=registry.example/python:3.11-slim-bookworm
#   podman run --rm -v "$PWD/examples:/examples:ro" kai-ray:0.1.0 simulate /examples/quickstart
#
# Two stages.  The builder makes the venv /opt/kai-ray: the dependencies listed in pyproject.toml
# first (a layer reused until they change), then kai-ray's wheel (`pip wheel --no-deps`), and
# finally takes pip and setuptools out of the venv.  The final stage is the same base with a
# non-root user (uid/gid 65532) and that venv alone: no compiler, no pip, no pip cache, no source
# tree, and nothing under /opt/kai-ray the user can write.  It needs no writable path but /tmp,
# so it runs with a read-only root filesystem (the chart's default).
#
# BASE must be a Debian-like image with python3 >= 3.11 and its venv module (the official
# python:3.11-slim images, or Debian's python3 + python3-venv); both stages use it, so the venv's
# interpreter path is valid in the final stage.
#
# Behind a TLS-intercepting proxy, give pip the proxy's CA bundle as the build secret `pip-ca`;
# it is mounted only while pip runs in the builder and never stored in an image:
#
#   make image PIP_CA=/etc/ssl/certs/ca-certificates.crt   # (the default is $PIP_CERT, if set)
#   podman build --secret id=pip-ca,src=/etc/ssl/certs/ca-certificates.crt -t kai-ray .
#   DOCKER_BUILDKIT=1 docker build --secret id=pip-ca,src=/etc/ssl/certs/ca-certificates.crt -t kai-ray .
#
# pip's downloads are kept in a build cache mount (BuildKit's, or buildah's under $TMPDIR), so a
# rebuild after a dependency change does not download everything again (where the index's
# responses are cacheable).  The RUN --mount options need BuildKit with docker (the default
# builder since Docker 23) or buildah/podman >= 1.24.
#
# Few layers after the dependencies on purpose: a storage driver without copy-on-write (vfs, what
# rootless or nested builders often fall back to) stores every layer as a full copy of the tree.

ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PIP_NO_INPUT=1
WORKDIR /src

# The dependencies alone, read from pyproject.toml: this layer only changes with them.
COPY pyproject.toml ./
RUN --mount=type=secret,id=pip-ca \
    --mount=type=cache,id=kai-ray-pip,target=/root/.cache/pip,sharing=locked \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
    && python3 -c 'import sys; assert sys.version_info >= (3, 11), f"BASE has Python {sys.version}, kai-ray needs >= 3.11"' \
    && python3 -m venv /opt/kai-ray \
    && python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
        > requirements.txt \
    && /opt/kai-ray/bin/pip install --requirement requirements.txt

# kai-ray itself.  The build context is exactly what the wheel is built from (.dockerignore lets
# in pyproject.toml, README.md, kai_ray/ and operators/ only), so one COPY takes it.
COPY . ./
RUN --mount=type=secret,id=pip-ca \
    --mount=type=cache,id=kai-ray-pip,target=/root/.cache/pip,sharing=locked \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
    && /opt/kai-ray/bin/pip wheel --no-deps --wheel-dir /wheels . \
    && /opt/kai-ray/bin/pip install --no-deps /wheels/kai_ray-*.whl \
    && /opt/kai-ray/bin/pip check \
    && /opt/kai-ray/bin/python -m pip uninstall --yes pip setuptools \
    && /opt/kai-ray/bin/kai-ray --help > /dev/null

FROM ${BASE}
# A fixed uid/gid (the usual "nonroot" 65532) so a pod's securityContext can name it
# (runAsUser/runAsGroup: 65532, runAsNonRoot: true).  --no-log-init: no huge sparse lastlog.
# The official python images carry pip, setuptools and wheel in the system Python: out with them
# too, so no Python in the image can install anything (Debian's python3 has no pip to remove).
RUN if python3 -m pip --version > /dev/null 2>&1; then \
        python3 -m pip uninstall --yes --quiet pip setuptools wheel; \
    fi \
    && groupadd --system --gid 65532 kai-ray \
    && useradd --system --no-log-init --uid 65532 --gid 65532 --home-dir /home/kai-ray --create-home \
        --shell /usr/sbin/nologin kai-ray
ENV PATH=/opt/kai-ray/bin:${PATH} \
    HOME=/home/kai-ray \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /home/kai-ray
USER 65532:65532
ENTRYPOINT ["kai-ray"]
CMD ["--help"]
# Owned by root: the user can read and run the venv but not change it.
COPY --from=builder /opt/kai-ray /opt/kai-ray
# Last, so that a new revision alone rebuilds nothing above.
ARG VERSION=""
ARG REVISION=""
LABEL org.opencontainers.image.title="kai-ray" \
      org.opencontainers.image.description="A Ray-native, KAI-compatible scheduler for GPU clusters" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
