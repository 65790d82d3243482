"""Topology-aware placement (spec §18): the domain tree of a Topology and the choice of domains."""
