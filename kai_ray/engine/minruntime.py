"""Minimum guaranteed runtime (§15): recently started jobs are protected from eviction.

A non-elastic victim inside its window is not a candidate at all; an elastic
one may only lose pods above its minimum while protected.
"""

from __future__ import annotations

from collections import Counter

from kai_ray.engine.jobs import Job, Task
from kai_ray.engine.session import Session
from kai_ray.model.objects import ACTIVE_USED

PLUGIN_NAME = "minruntime"


def parse_duration(text: str) -> float:
    """Go-style durations ("90s", "5m", "1h30m"); negative or invalid → 0, as KAI does."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    total, number = 0.0, ""
    index = 0
    text = text.strip()
    try:
        while index < len(text):
            char = text[index]
            if char.isdigit() or char == ".":
                number += char
                index += 1
                continue
            unit = "ms" if text.startswith("ms", index) else char
            total += float(number) * units[unit]
            number, index = "", index + len(unit)
        if number:
            total += float(number)
    except (KeyError, ValueError):
        return 0.0
    return max(total, 0.0)


class MinRuntime:
    def __init__(self, session: Session) -> None:
        self.session = session
        args = session.config.plugin_arguments(PLUGIN_NAME)
        self.enabled = session.config.has_plugin(PLUGIN_NAME)
        self.default_preempt = parse_duration(args.get("defaultPreemptMinRuntime", "0s"))
        self.default_reclaim = parse_duration(args.get("defaultReclaimMinRuntime", "0s"))
        self.method = args.get("reclaimResolveMethod", "lca")

    def reads_start_times(self) -> bool:
        """Whether a job's start can protect it this session: the plugin is on and some runtime
        is set (a default or a queue's). A backend that keeps starts between cycles writes them
        only then, so a cluster without min-runtime pays no write per started gang."""
        if not self.enabled:
            return False
        queues = self.session.snapshot.queues.values()
        runtimes = [q.preempt_min_runtime for q in queues] + [q.reclaim_min_runtime for q in queues]
        return self.default_preempt > 0 or self.default_reclaim > 0 or any(r for r in runtimes if r)

    def _protected(self, job: Job, runtime: float) -> bool:
        return self.enabled and job.last_start is not None and self.session.now < job.last_start + runtime

    def preempt_runtime(self, victim: Job) -> float:
        return self._walk_up(
            self.session.snapshot.ancestry(victim.queue), "preempt_min_runtime", self.default_preempt
        )

    def reclaim_runtime(self, reclaimer: Job, victim: Job) -> float:
        victim_chain = self.session.snapshot.ancestry(victim.queue)
        if self.method == "queue":
            return self._walk_up(victim_chain, "reclaim_min_runtime", self.default_reclaim)
        reclaimer_chain = self.session.snapshot.ancestry(reclaimer.queue)
        if victim_chain[-1] != reclaimer_chain[-1]:
            top = self.session.snapshot.queues[victim_chain[-1]].reclaim_min_runtime
            return self.default_reclaim if top is None else max(top, 0.0)
        shared = set(reclaimer_chain)
        below_lca = (
            next(i for i, q in enumerate(victim_chain) if victim_chain[i + 1] in shared)
            if len(victim_chain) > 1
            else 0
        )
        return self._walk_up(victim_chain[below_lca:], "reclaim_min_runtime", self.default_reclaim)

    def _walk_up(self, chain: list[str], attribute: str, default: float) -> float:
        for name in chain:
            value = getattr(self.session.snapshot.queues[name], attribute)
            if value is not None:
                return float(max(value, 0.0))
        return default

    def is_candidate(self, victim: Job, runtime: float) -> bool:
        return victim.is_elastic() or not self._protected(victim, runtime)

    def allows(self, victims: list[Task], runtime_of: dict[Job, float]) -> bool:
        """A protected elastic victim may only lose pods above each pod set's minimum."""
        taken = Counter((t.job, t.pod_set.name if t.pod_set else "") for t in victims)
        for (job, pod_set_name), count in taken.items():
            if not self._protected(job, runtime_of[job]):
                continue
            pod_set = job.pod_sets[pod_set_name]
            if pod_set.count(ACTIVE_USED) - count < pod_set.min_available:
                return False
        return True
