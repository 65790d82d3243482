"""What can go wrong with a shard's answer, and how the coordinator tells.

A shard is another process: it can die, hang, lose its rows, miss an update,
or answer about rows it does not hold. Any of these, trusted, would make the
plan depend on a fault instead of on the cluster, so every reply is checked
before it is merged: the shard echoes a digest of the rows it scored, which
must equal the digest of the rows the driver believes it holds, and every row
it names must be one of its partition's. A reply that fails is never merged;
the driver ranks that partition itself, so the batch's answer stays exact.
"""

from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass

import numpy as np

from kai_ray.distributed.kernels import NodeRows, RankedRows


class ShardFault(enum.StrEnum):
    """Why a shard's reply was not merged."""

    DIED = "died"
    """The shard's process ended (a crash, an OOM kill, a lost node)."""
    TIMEOUT = "timeout"
    """No reply within the call's deadline; the shard is presumed stuck and replaced."""
    EMPTY = "empty"
    """A reply without an answer for every pod shape of the batch."""
    STALE = "stale"
    """The rows the shard scored are not the rows it was sent (a missed or corrupt update)."""
    FOREIGN_ROWS = "foreign-rows"
    """The reply names rows outside the shard's partition."""
    MISSING = "missing"
    """The coordinator's reply says nothing of this shard at all."""


REPLACING_FAULTS = frozenset({ShardFault.DIED, ShardFault.TIMEOUT})
"""Faults after which the shard actor is ended and a new one seeded; after the others the shard
is alive but its rows cannot be trusted, so it is only seeded afresh."""


def rows_digest(nodes: NodeRows) -> int:
    """A checksum of exactly the state a shard scores: which rows, and their numbers.

    crc32 rather than `hash`: the driver and the shard are different processes,
    and Python salts `hash` of bytes per process.
    """
    digest = 0
    for array in (
        nodes.rows,
        nodes.allocatable,
        nodes.idle,
        nodes.releasing,
        nodes.schedulable,
        nodes.has_open_group,
    ):
        digest = zlib.crc32(np.ascontiguousarray(array).tobytes(), digest)
    return digest


@dataclass(frozen=True)
class ShardReply:
    """A shard's answers for a batch, with the digest of the rows it scored and its compute time."""

    answers: list[RankedRows]
    digest: int
    seconds: float


def check_reply(
    reply: ShardReply, expected_digest: int, partition: np.ndarray, shapes: int
) -> ShardFault | None:
    """The fault in a reply, or None when it may be merged."""
    if len(reply.answers) != shapes:
        return ShardFault.EMPTY
    if reply.digest != expected_digest:
        return ShardFault.STALE
    named = [answer.rows for answer in reply.answers if len(answer.rows)]
    if named and not np.isin(np.concatenate(named), partition).all():
        return ShardFault.FOREIGN_ROWS
    return None
