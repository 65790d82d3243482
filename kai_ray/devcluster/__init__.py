"""A throwaway Kubernetes control plane on loopback (etcd, kube-apiserver, kwok, kube-controller-manager).

Not part of a running scheduler: `kai-ray devcluster up/down`, the Kubernetes tests and
`kai-ray bench --kube` use it.  `control_plane` starts and stops it, `seeding` creates what a
fresh KAI install has (kai-ray's CRDs generated from its models, so no checkout is needed),
`processes` keeps track of what was started, `binaries` finds (or builds, from the packaged
`toolchain/`) the executables, `credentials` writes keys and kubeconfigs, `audit` reads the
API server's record of writes, `fake_kubelet` plays the kubelet when kwok was not built,
`operators` runs the upstream KubeRay and Kubeflow training operators against it.
`CONTROLLERS` are the kube-controller-manager controllers it runs (and the reasons).
"""

from kai_ray.devcluster.audit import read_audit_events
from kai_ray.devcluster.binaries import (
    DevClusterError,
    build_bins,
    build_operators,
    repo_root,
    require_binaries,
)
from kai_ray.devcluster.control_plane import (
    CONTROLLERS,
    ControllerManager,
    DevCluster,
    PodRunner,
    start,
    stop,
)
from kai_ray.devcluster.credentials import service_account_kubeconfig
from kai_ray.devcluster.fake_kubelet import run_fake_kubelet
from kai_ray.devcluster.operators import (
    KUBERAY,
    TRAINING_OPERATOR,
    OperatorProcess,
    install_upstream_crds,
    start_kuberay,
    start_training_operator,
    stop_operator,
    upstream_crd_dir,
)
from kai_ray.devcluster.seeding import (
    DEFAULT_PRIORITY_CLASSES,
    FAKE_NODE_ANNOTATION,
    crd_documents,
    create_default_objects,
    create_gpu_node,
    generated_crds,
    install_crd_manifests,
    install_crds,
)

__all__ = [
    "CONTROLLERS",
    "DEFAULT_PRIORITY_CLASSES",
    "FAKE_NODE_ANNOTATION",
    "KUBERAY",
    "TRAINING_OPERATOR",
    "ControllerManager",
    "DevCluster",
    "DevClusterError",
    "OperatorProcess",
    "PodRunner",
    "build_bins",
    "build_operators",
    "crd_documents",
    "create_default_objects",
    "create_gpu_node",
    "generated_crds",
    "install_crd_manifests",
    "install_crds",
    "install_upstream_crds",
    "read_audit_events",
    "repo_root",
    "require_binaries",
    "run_fake_kubelet",
    "service_account_kubeconfig",
    "start",
    "start_kuberay",
    "start_training_operator",
    "stop",
    "stop_operator",
    "upstream_crd_dir",
]
