"""Kubernetes backend of kai-ray: talks to a real kube-apiserver (see `devcluster` for the test one)."""
