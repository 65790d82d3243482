"""What a lost or refusing API server raises: the failures a loop logs as one line and outlives."""

from __future__ import annotations

from typing import Final

import urllib3
from kubernetes.client.exceptions import ApiException

__all__ = ["API_FAILURES"]

API_FAILURES: Final = (ApiException, urllib3.exceptions.HTTPError, OSError)
"""Anything else escaping a cycle or a grouping pass is a bug."""
