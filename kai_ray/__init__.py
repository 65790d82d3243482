"""kai-ray: a Ray-native, KAI-compatible scheduler for GPU clusters."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kai-ray")
except PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0.0.0+checkout"
