"""The ``grpcurl`` binary the gRPC API's tests use, built once from its Go module like helm.

grpcurl is a client no one here wrote: it learns the API only from the server's reflection
service, so a test driving it checks what an outside client sees (service names, JSON field
names, status codes), not what our own generated stubs agree with.
"""

from __future__ import annotations

from pathlib import Path

from kai_ray.devcluster.binaries import built_dir

__all__ = ["GRPCURL_BINARIES", "build_grpcurl"]

GRPCURL_BINARIES = ("grpcurl",)


def build_grpcurl(timeout: float = 3600.0) -> Path:
    """Build (first time only) or locate grpcurl and return its directory.

    Separate from ``build_bins``: only the gRPC tests and docs need it.  ``KAI_RAY_GRPCURL_BIN_DIR``
    points at a directory that already holds a grpcurl binary, skipping the build.
    """
    return built_dir("build-grpcurl.sh", "KAI_RAY_GRPCURL_BIN_DIR", GRPCURL_BINARIES, timeout)
