"""Rules that read what other pods hold: inter-pod affinity, spread, host ports, extended resources."""

from __future__ import annotations

import copy

import pytest
from builders import ClusterBuilder, binds, cluster, config, find_task, open_session, pipelined, run_cycle

from kai_ray.engine.constraints.index import CountMode
from kai_ray.engine.explanation import node_refusals
from kai_ray.engine.reasons import NodeFilterCause, PendingCause
from kai_ray.engine.statement import Statement
from kai_ray.model.objects import AffinityRequirement as Req
from kai_ray.model.objects import (
    Blocker,
    BlockerCause,
    HeldPod,
    HostPort,
    LabelSelector,
    PodAffinitySpec,
    PodAffinityTerm,
    PreferredNodeTerm,
    SpreadConstraint,
    Taint,
    TaskSpec,
    TaskStatus,
)
from kai_ray.model.objects import NodeSelectorTerm as Term

pytestmark = pytest.mark.unit

S = TaskStatus
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def web(key: str = "app", value: str = "web", topology: str = HOST, weight: int = 0) -> PodAffinityTerm:
    return PodAffinityTerm(topology, LabelSelector(match_labels=((key, value),)), frozenset({""}), weight)


def nodes(
    builder: ClusterBuilder, count: int = 3, gpus: int = 8, zones: tuple[str, ...] = ()
) -> ClusterBuilder:
    for i in range(count):
        labels = {HOST: f"n{i}"}
        if zones:
            labels[ZONE] = zones[i]
        builder.node(f"n{i}", gpus=gpus, labels=labels)
    return builder.queue("q")


def lone_pods(builder: ClusterBuilder, prefix: str, count: int, **fields: object) -> ClusterBuilder:
    for i in range(count):
        builder.job(f"{prefix}{i}", queue="q", gpus=1, pods=0, created=float(i))
        builder.task(**fields)  # type: ignore[arg-type]
    return builder


ANTI_WEB = PodAffinitySpec(required_anti=(web(),))


def test_required_anti_affinity_puts_one_replica_per_node_and_explains_the_fourth() -> None:
    state = lone_pods(nodes(cluster()), "web", 4, labels={"app": "web"}, pod_affinity=ANTI_WEB).build()
    plan = run_cycle(state)
    assert sorted(binds(plan).values()) == ["n0", "n1", "n2"]
    reason = plan.pending_reasons["web3"].message
    assert "3 nodes: pod anti-affinity with web0-0 on kubernetes.io/hostname" in reason


def test_without_the_rule_the_same_replicas_share_a_node() -> None:
    state = lone_pods(nodes(cluster()), "web", 4, labels={"app": "web"}).build()
    assert sorted(set(binds(run_cycle(state)).values())) == ["n0"]


def test_a_gang_whose_pods_repel_each_other_is_all_or_nothing() -> None:
    builder = nodes(cluster(), count=2).job("g", queue="q", gpus=1, pods=0)
    for _ in range(3):
        builder.task(labels={"app": "web"}, pod_affinity=ANTI_WEB)
    plan = run_cycle(builder.build())
    assert plan.binds == [] and plan.pipelined == []
    assert "anti-affinity" in plan.pending_reasons["g"].message


def test_a_running_pods_anti_affinity_keeps_matching_pods_off_its_node() -> None:
    builder = nodes(cluster(), count=2).job("guard", queue="q", gpus=1, pods=0)
    builder.task(status=S.RUNNING, node="n0", labels={"app": "guard"}, pod_affinity=ANTI_WEB)
    lone_pods(builder, "web", 2, labels={"app": "web"})
    plan = run_cycle(builder.build())
    assert set(binds(plan).values()) == {"n1"}


def test_required_affinity_follows_the_selected_pods_zone_and_the_first_pod_goes_anywhere() -> None:
    zones = ("a", "a", "b")
    db = PodAffinitySpec(required=(web("app", "db", ZONE),))
    builder = nodes(cluster(), zones=zones).job("db", queue="q", gpus=1, pods=0)
    builder.task(status=S.RUNNING, node="n2", labels={"app": "db"})
    lone_pods(builder, "client", 2, labels={"app": "client"}, pod_affinity=db)
    assert set(binds(run_cycle(builder.build())).values()) == {"n2"}
    alone = lone_pods(nodes(cluster(), zones=zones), "db", 1, labels={"app": "db"}, pod_affinity=db).build()
    assert len(binds(run_cycle(alone))) == 1
    stranger = lone_pods(nodes(cluster(), zones=zones), "c", 1, labels={"app": "c"}, pod_affinity=db).build()
    plan = run_cycle(stranger)
    assert plan.binds == []
    assert "no pod the pod's affinity needs" in plan.pending_reasons["c0"].message


def test_host_ports_conflict_per_node_unless_on_different_addresses() -> None:
    port = (HostPort(8080),)
    plan = run_cycle(lone_pods(nodes(cluster()), "p", 4, host_ports=port).build())
    assert sorted(binds(plan).values()) == ["n0", "n1", "n2"]
    assert "3 nodes: host port 8080/TCP in use" in plan.pending_reasons["p3"].message
    separate = nodes(cluster(), count=1)
    lone_pods(separate, "a", 1, host_ports=(HostPort(8080, "TCP", "10.0.0.1"),))
    lone_pods(separate, "b", 1, host_ports=(HostPort(8080, "TCP", "10.0.0.2"),))
    lone_pods(separate, "u", 1, host_ports=(HostPort(8080, "UDP"),))
    assert len(run_cycle(separate.build()).binds) == 3


def test_extended_resources_fit_only_where_published_and_count_every_holder() -> None:
    builder = cluster().queue("q")
    builder.node("plain", gpus=8)
    builder.node("rdma", gpus=8, extended={"rdma/hca": 2.0})
    builder.job("holder", queue="q", gpus=0, pods=0).task(
        status=S.RUNNING, node="rdma", extended=(("rdma/hca", 1.0),)
    )
    lone_pods(builder, "r", 2, extended=(("rdma/hca", 1.0),))
    plan = run_cycle(builder.build())
    assert binds(plan) == {"r0-0": "rdma"}
    assert "insufficient rdma/hca" in plan.pending_reasons["r1"].message
    big = lone_pods(nodes(cluster(), count=1), "e", 1, extended=(("ephemeral-storage", 1e14),)).build()
    assert run_cycle(big).binds == []


def test_spread_keeps_the_skew_within_max_skew_over_zones() -> None:
    spread = (SpreadConstraint(1, ZONE, LabelSelector(match_labels=(("app", "web"),))),)
    builder = nodes(cluster(), count=4, zones=("a", "a", "b", "b"))
    lone_pods(builder, "w", 4, labels={"app": "web"}, spread=spread)
    zone_of = {"n0": "a", "n1": "a", "n2": "b", "n3": "b"}
    placed = [zone_of[node] for node in binds(run_cycle(builder.build())).values()]
    assert sorted(placed) == ["a", "a", "b", "b"]


def test_spread_with_min_domains_refuses_when_too_few_domains_exist() -> None:
    spread = (SpreadConstraint(1, ZONE, LabelSelector(match_labels=(("app", "web"),)), min_domains=3),)
    builder = nodes(cluster(), count=2, zones=("a", "b"))
    lone_pods(builder, "w", 3, labels={"app": "web"}, spread=spread)
    plan = run_cycle(builder.build())
    assert len(plan.binds) == 2
    assert "topology spread" in plan.pending_reasons["w2"].message


def test_preferred_terms_choose_among_fitting_nodes() -> None:
    near = PodAffinitySpec(preferred=(web("app", "cache", HOST, 50),))
    builder = nodes(cluster()).job("cache", queue="q", gpus=1, pods=0)
    builder.task(status=S.RUNNING, node="n1", labels={"app": "cache"})
    lone_pods(builder, "w", 1, pod_affinity=near)
    assert binds(run_cycle(builder.build())) == {"w0-0": "n1"}
    prefer = (PreferredNodeTerm(10, Term(expressions=(Req(HOST, "In", ("n2",)),))),)
    chosen = lone_pods(nodes(cluster()), "p", 1, preferred_node_affinity=prefer).build()
    assert binds(run_cycle(chosen)) == {"p0-0": "n2"}


def test_rollback_restores_the_pod_index_exactly() -> None:
    state = lone_pods(nodes(cluster()), "web", 1, labels={"app": "web"}, pod_affinity=ANTI_WEB).build()
    session = open_session(state, config())
    constraints = session.pod_constraints
    assert constraints is not None
    task = find_task(session, "web0-0")
    before = constraints.verdict(task)
    assert before is not None and before.admits.all()
    statement = Statement(session)
    statement.allocate(task, 1)
    selected = constraints.index.selected((web().selector, web().namespaces, CountMode.AFFINITY))
    assert selected.tolist() == [0, 1, 0]
    statement.discard()
    assert selected.tolist() == [0, 0, 0]
    assert constraints.index.members == {}


def test_a_pod_evicted_in_the_session_no_longer_blocks_but_a_terminating_one_does() -> None:
    builder = nodes(cluster(), count=1)
    builder.job("victim", queue="q", gpus=1, pods=0).task(status=S.RUNNING, node="n0", labels={"app": "web"})
    builder.job("going", queue="q", gpus=1, pods=0).task(status=S.RELEASING, node="n0", labels={"app": "x"})
    lone_pods(builder, "new", 1, pod_affinity=ANTI_WEB)
    session = open_session(builder.build(), config())
    constraints = session.pod_constraints
    assert constraints is not None
    newcomer = find_task(session, "new0-0")
    verdict = constraints.verdict(newcomer)
    assert verdict is not None and not verdict.admits[0]
    Statement(session).evict(find_task(session, "victim-0"))
    verdict = constraints.verdict(newcomer)
    assert verdict is not None and verdict.admits[0]
    refusals = constraints.refusals(newcomer)
    assert refusals == []
    anti_x = PodAffinitySpec(required_anti=(web("app", "x"),))
    blocked = lone_pods(nodes(cluster(), count=1), "n", 1, pod_affinity=anti_x)
    blocked.job("going", queue="q", gpus=1, pods=0).task(status=S.RELEASING, node="n0", labels={"app": "x"})
    session = open_session(blocked.build(), config())
    assert session.pod_constraints is not None
    refusal = session.pod_constraints.refusals(find_task(session, "n0-0"))
    assert [r.cause for r in refusal] == [NodeFilterCause.POD_ANTI_AFFINITY]


def test_a_pod_that_waits_for_a_going_pods_port_is_pipelined_not_bound() -> None:
    builder = nodes(cluster(), count=1)
    builder.job("going", queue="q", gpus=1, pods=0).task(
        status=S.RELEASING, node="n0", host_ports=(HostPort(80),)
    )
    lone_pods(builder, "p", 1, host_ports=(HostPort(80),))
    plan = run_cycle(builder.build())
    assert plan.binds == [] and pipelined(plan) == {"p0-0": "n0"}


def test_no_pod_rule_means_no_index() -> None:
    session = open_session(lone_pods(nodes(cluster()), "p", 2).build(), config())
    assert session.pod_constraints is None


def test_node_refusals_count_each_cause_on_its_own() -> None:
    builder = nodes(cluster())
    builder.node("cordoned", gpus=8, unschedulable=True, labels={HOST: "cordoned"})
    builder.job("web", queue="q", gpus=1, pods=0).task(status=S.RUNNING, node="n0", labels={"app": "web"})
    lone_pods(
        builder, "p", 1, pod_affinity=ANTI_WEB, host_ports=(HostPort(80),), extended=(("rdma/hca", 1.0),)
    )
    builder.job("port", queue="q", gpus=1, pods=0).task(
        status=S.RUNNING, node="n1", host_ports=(HostPort(80),)
    )
    session = open_session(builder.build(), config())
    refusals = {(r.cause, r.nodes, r.message) for r in node_refusals(session, find_task(session, "p0-0"))}
    assert refusals == {
        (NodeFilterCause.UNSCHEDULABLE, 1, "unschedulable, not ready or under pressure"),
        (NodeFilterCause.POD_ANTI_AFFINITY, 1, "pod anti-affinity with web-0 on kubernetes.io/hostname"),
        (NodeFilterCause.HOST_PORTS, 1, "host port 80/TCP in use"),
        (NodeFilterCause.INSUFFICIENT_RESOURCES, 4, "insufficient rdma/hca"),
    }


def test_a_gang_that_needs_its_own_company_is_tried_in_every_domain() -> None:
    together = PodAffinitySpec(required=(web("app", "team", ZONE),))
    builder = cluster().queue("q")
    builder.node("a-big", gpus=2, labels={HOST: "a-big", ZONE: "a"})
    builder.node("b-1", gpus=2, labels={HOST: "b-1", ZONE: "b"})
    builder.node("b-2", gpus=2, labels={HOST: "b-2", ZONE: "b"})
    builder.job("team", queue="q", gpus=1, pods=0)
    for _ in range(4):
        builder.task(labels={"app": "team"}, pod_affinity=together)
    placed = binds(run_cycle(builder.build()))
    assert sorted(placed.values()) == ["b-1", "b-1", "b-2", "b-2"]


def test_a_term_selects_only_pods_of_its_namespaces() -> None:
    other_namespace = PodAffinityTerm(
        HOST, LabelSelector(match_labels=(("app", "web"),)), frozenset({"prod"})
    )
    builder = nodes(cluster(), count=2)
    builder.job("dev-web", queue="q", gpus=1, pods=0, namespace="dev")
    builder.task(status=S.RUNNING, node="n0", labels={"app": "web"})
    builder.job("prod-web", queue="q", gpus=1, pods=0, namespace="prod")
    builder.task(status=S.RUNNING, node="n1", labels={"app": "web"})
    lone_pods(builder, "p", 1, pod_affinity=PodAffinitySpec(required_anti=(other_namespace,)))
    assert binds(run_cycle(builder.build())) == {"p0-0": "n0"}


def test_another_schedulers_pod_counts_for_affinity_ports_and_resources() -> None:
    builder = nodes(cluster(), count=2)
    builder.node("n2", gpus=8, labels={HOST: "n2"}, extended={"rdma/hca": 1.0})
    lone_pods(
        builder, "p", 1, pod_affinity=ANTI_WEB, host_ports=(HostPort(80),), extended=(("rdma/hca", 1.0),)
    )
    state = builder.build()
    foreign = TaskSpec(
        name="other", status=S.RUNNING, node="n2", labels={"app": "web"}, extended=(("rdma/hca", 1.0),)
    )
    state.held.append(HeldPod("kube-system", foreign, foreign=True))
    plan = run_cycle(state)
    assert plan.binds == []
    reason = plan.pending_reasons["p0"].message
    assert "insufficient rdma/hca" in reason


def test_spread_honours_taints_only_when_the_policy_says_so() -> None:
    selector = LabelSelector(match_labels=(("app", "web"),))
    builder = cluster().queue("q")
    builder.node("a0", gpus=8, labels={HOST: "a0", ZONE: "a"})
    builder.node("b0", gpus=8, labels={HOST: "b0", ZONE: "b"}, taints=[Taint("dedicated", "x", "NoSchedule")])
    builder.job("w", queue="q", gpus=1, pods=0).task(status=S.RUNNING, node="a0", labels={"app": "web"})
    for honor, expected in ((False, set()), (True, {"a0"})):
        rule = SpreadConstraint(1, ZONE, selector, honor_node_taints=honor)
        state = lone_pods(copy.deepcopy(builder), "p", 1, labels={"app": "web"}, spread=(rule,)).build()
        assert set(binds(run_cycle(state)).values()) == expected


@pytest.mark.parametrize(
    ("cause", "expected"),
    [
        (BlockerCause.CONFIG_MAP_MISSING, PendingCause.WAITING_FOR_OBJECT),
        (BlockerCause.CLAIM_UNBOUND, PendingCause.WAITING_FOR_OBJECT),
        (BlockerCause.INVALID_CONSTRAINT, PendingCause.INVALID),
    ],
)
def test_a_blocked_pod_waits_with_its_typed_cause_and_its_words(
    cause: BlockerCause, expected: PendingCause
) -> None:
    builder = nodes(cluster(), count=1).job("g", queue="q", gpus=1, pods=0)
    builder.task(blockers=(Blocker(cause, "configmap team/settings not found"),))
    builder.task()
    plan = run_cycle(builder.build())
    assert plan.binds == []
    reason = plan.pending_reasons["g"]
    assert reason.cause is expected
    assert "pod g-0: configmap team/settings not found" in reason.message
