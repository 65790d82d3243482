"""Leader election on a coordination.k8s.io Lease, as client-go does it, feeding the fence.

Only one replica may schedule.  The rules are client-go's (and so KAI's):

- a candidate takes the lease when it is free (no holder: its leader gave it
  up) or when the record has not changed for a whole lease duration *as this
  replica observed it*, measured on its own monotonic clock from the moment it
  first saw that record: two replicas' wall clocks never need to agree;
- the leader renews every retry period on a thread of its own, so a long
  cycle never lets the lease lapse;
- a leader that has not renewed within the renew deadline is fenced: every
  further write is refused (see `fence`) and its owner stops acting;
- every write carries the resourceVersion it read, so two candidates racing
  for an expired lease cannot both win (the API server refuses the second).

One rule is not client-go's: there a leader past its renew deadline stops
leading for good (and KAI's scheduler exits).  Here a fenced leader keeps
trying, because an API server outage stops renewals as surely as a take-over
does, and a sole replica that exits in an outage leaves nothing scheduling
afterwards.  When it reads the lease again it renews it only if the lease is
still its own: the same holder (itself) and the same `leaseTransitions` as it
last wrote.  Every take-over increments transitions, so a lease that another
replica took fails that test even if it was given back since; so does a lease
that was deleted.  Then leadership is lost for good and the owner exits.  A
standby that finds the same expired record at the same moment races the
renewal with the same resourceVersion, so only one of the two writes succeeds.

The lease is named after the scheduler (`lease_name`), so schedulers with
different names elect their leaders independently.
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_ray.cluster.kube.fence import Leadership

__all__ = ["LeaderElector", "LeaseTiming", "Standing", "lease_name"]

log = logging.getLogger(__name__)

_CALL_TIMEOUT = (2.0, 3.0)
"""(connect, read) seconds for one lease call: several fit in a renew deadline."""
_STOP_CHECK_SECONDS = 0.2


def lease_name(scheduler_name: str, component: str = "") -> str:
    """One Lease per scheduler name and component: two schedulers, or a scheduler and its
    standalone podgrouper, never contend for one lease."""
    return f"kai-ray-{scheduler_name}-{component}" if component else f"kai-ray-{scheduler_name}"


@dataclass(frozen=True)
class LeaseTiming:
    """client-go's defaults, which KAI's components use."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs retry period < renew deadline < lease duration, got "
                f"{self.retry_period} / {self.renew_deadline} / {self.lease_duration}"
            )


@dataclass(frozen=True)
class _Record:
    """The parts of a lease that say who holds it; any change restarts the observed clock."""

    holder: str
    renew_time: str
    transitions: int


class Standing(enum.Enum):
    """Where a replica stands when it is told to act, or why it never will again."""

    LEADING = "leading"
    LOST = "lost"
    """Another replica took the lease (or it was deleted): this replica exits."""
    STOPPED = "stopped"


class LeaderElector:
    """Acquires and keeps the lease for `identity`; `run` is a thread body.

    `api` must not be fenced: the lease is how leadership is won in the first place.
    """

    def __init__(
        self,
        api: Any,
        namespace: str,
        name: str,
        identity: str,
        timing: LeaseTiming | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timing = timing or LeaseTiming()
        self.leadership = Leadership(self.timing.renew_deadline, clock)
        self._leases = client.CoordinationV1Api(api)
        self._clock = clock
        self._observed: _Record | None = None
        self._observed_at = 0.0
        self._transitions: int | None = None
        """The lease's transitions as this replica last wrote them; None until it first leads."""

    # ---------------------------------------------------------------- the thread
    def run(self, stop: threading.Event) -> None:
        """Acquire, then renew until `stop` or until another replica takes the lease."""
        while not stop.is_set():
            if self.try_acquire_or_renew():
                break
            stop.wait(self.timing.retry_period * (1 + 0.2 * random.random()))  # client-go's jitter
        else:
            return
        log.info("leading as %s (lease %s/%s)", self.identity, self.namespace, self.name)
        self._keep(stop)

    def _keep(self, stop: threading.Event) -> None:
        """Renew every retry period; past the renew deadline say once that writes are fenced,
        and once that they are not when a renewal succeeds again."""
        renewed_at, fenced = self._clock(), False
        while not stop.wait(self.timing.retry_period):
            if not fenced and not self.leadership.is_leader():
                fenced = True
                log.warning(
                    "lease %s/%s not renewed within %.0fs; writes are fenced until it is renewed "
                    "or another replica takes it",
                    self.namespace,
                    self.name,
                    self.timing.renew_deadline,
                )
            if self.try_acquire_or_renew():
                if fenced:
                    log.info(
                        "lease %s/%s renewed after an outage of %.0fs; it was still ours, so this "
                        "replica resumes",
                        self.namespace,
                        self.name,
                        self._clock() - renewed_at,
                    )
                renewed_at, fenced = self._clock(), False
            elif self.leadership.lost:
                return

    def lead(self, stop: threading.Event) -> bool:
        """Run the elector on its own thread and wait until it leads; False when stopped first."""
        threading.Thread(target=self.run, args=(stop,), name="kai-leader", daemon=True).start()
        return self.wait_to_lead(stop) is Standing.LEADING

    def wait_to_lead(self, stop: threading.Event) -> Standing:
        """LEADING at once while this replica leads; while it is fenced (its lease not renewed
        in time), wait until it is renewed, another replica takes it, or `stop` is set."""
        while not stop.is_set():
            if self.leadership.wait_leading(_STOP_CHECK_SECONDS):
                return Standing.LEADING
            if self.leadership.lost:
                return Standing.LOST
        return Standing.STOPPED

    # ---------------------------------------------------------------- one attempt
    def try_acquire_or_renew(self) -> bool:
        """True when this replica now holds the lease; never raises on conflicts or outages.

        Once it has led it renews only its own lease; finding it taken loses leadership.
        """
        if self.leadership.lost:
            return False
        sent_at = self._clock()
        try:
            lease = self._read()
        except ApiException as error:
            if error.status != 404:
                log.debug("reading lease %s/%s failed: %s", self.namespace, self.name, error.reason)
                return False
            if self._transitions is None:
                return self._create(sent_at)
            self._lose(f"lease {self.namespace}/{self.name} was deleted")
            return False
        except Exception as error:  # unreachable server, timeout
            log.debug("reading lease %s/%s failed: %s", self.namespace, self.name, error)
            return False
        spec = lease.spec or client.V1LeaseSpec()
        lease.spec = spec
        self._observe(spec, self._clock())
        holder = spec.holder_identity or ""
        if self._transitions is not None:
            taken = self._taken(holder, int(spec.lease_transitions or 0))
            if taken:
                self._lose(taken)
                return False
        elif holder and holder != self.identity and not self._expired(spec):
            return False
        now = _wall_clock()
        if holder != self.identity:
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.holder_identity = self.identity
        spec.lease_duration_seconds = int(self.timing.lease_duration)
        spec.renew_time = now
        try:
            self._replace(lease)
        except Exception as error:  # 409: someone else wrote first; or an outage
            log.debug("updating lease %s/%s failed: %s", self.namespace, self.name, error)
            return False
        self._transitions = int(spec.lease_transitions or 0)
        self.leadership.renewed(sent_at)
        return True

    def release(self) -> None:
        """Give the lease up at shutdown so a standby takes over at once (only while still leading)."""
        if not self.leadership.is_leader():
            return
        try:
            lease = self._read()
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = ""
            self._replace(lease)
        except Exception as error:  # the standby takes over when the lease expires instead
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, error)
        self.leadership.lose()

    def _read(self) -> Any:
        return self._leases.read_namespaced_lease(self.name, self.namespace, _request_timeout=_CALL_TIMEOUT)

    def _replace(self, lease: Any) -> None:
        leases = self._leases
        leases.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=_CALL_TIMEOUT)

    def _create(self, sent_at: float) -> bool:
        now = _wall_clock()
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
            spec=client.V1LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=int(self.timing.lease_duration),
                acquire_time=now,
                renew_time=now,
                lease_transitions=0,
            ),
        )
        try:
            self._leases.create_namespaced_lease(self.namespace, body, _request_timeout=_CALL_TIMEOUT)
        except Exception as error:  # 409: another replica created it first
            log.debug("creating lease %s/%s failed: %s", self.namespace, self.name, error)
            return False
        self._transitions = 0
        self.leadership.renewed(sent_at)
        return True

    def _taken(self, holder: str, transitions: int) -> str:
        """Why the lease this replica led with is no longer its own; empty while it is."""
        where = f"lease {self.namespace}/{self.name}"
        if holder != self.identity:
            return f"replica {holder} holds {where} now" if holder else f"{where} has no holder now"
        if transitions != self._transitions:
            was = self._transitions
            return (
                f"{where} changed hands since this replica renewed it (transitions {transitions}, was {was})"
            )
        return ""

    def _lose(self, why: str) -> None:
        self.leadership.lose()
        log.error("lost leadership: %s; stopping", why)

    def _observe(self, spec: Any, read_at: float) -> None:
        renew = spec.renew_time.isoformat() if spec.renew_time is not None else ""
        record = _Record(spec.holder_identity or "", renew, int(spec.lease_transitions or 0))
        if record != self._observed:
            self._observed, self._observed_at = record, read_at

    def _expired(self, spec: Any) -> bool:
        """Unchanged for a whole lease duration since this replica first saw it."""
        duration = float(spec.lease_duration_seconds or self.timing.lease_duration)
        return self._clock() > self._observed_at + duration


def _wall_clock() -> dt.datetime:
    """What the lease's timestamps carry (informational only: expiry uses the observed clock).

    Lease times are MicroTime, which the API server parses only with a fraction; the client
    writes `isoformat()`, which leaves the fraction out when it is zero, so it never is here.
    """
    now = dt.datetime.now(dt.UTC)
    return now.replace(microsecond=now.microsecond or 1)
