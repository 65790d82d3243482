"""Stable identities for objects that exist only in manifests.

On a cluster the API server gives every object a random uid, and PodGroup names
carry it (`pg-<owner>-<uid>`). Manifests have no uids, and `kai-ray simulate`
must give the same plan for the same files every time, so objects without one
get a uid derived from what names them, and the objects a simulated controller
creates get names and uids derived from their parent's.
"""

from __future__ import annotations

import uuid
from typing import Final

__all__ = ["generated_name", "stable_uid"]

_NAMESPACE: Final = uuid.UUID("5f1c2f8e-2a3b-4c7d-9e10-6b7a8c9d0e1f")
"""Fixed seed of kai-ray's uuid5 space: the uids never depend on the machine or the run."""


def stable_uid(api_version: str, kind: str, namespace: str, name: str) -> str:
    """The uid an object of this identity is given when its manifest has none."""
    group = api_version.rpartition("/")[0]
    return str(uuid.uuid5(_NAMESPACE, f"{group}/{kind}/{namespace}/{name}"))


_SUFFIX_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
"""The alphabet of the API server's `generateName` suffixes (no vowels, no look-alikes)."""


def generated_name(generate_name: str, seed: str) -> str:
    """The name the API server would give a `generateName` object, five suffix characters long,
    chosen from `seed` (where the object is written) instead of at random."""
    number = uuid.uuid5(_NAMESPACE, f"generateName/{generate_name}/{seed}").int
    suffix = ""
    for _ in range(5):
        number, digit = divmod(number, len(_SUFFIX_ALPHABET))
        suffix += _SUFFIX_ALPHABET[digit]
    return generate_name + suffix
