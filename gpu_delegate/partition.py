"""Grouping the nodes a delegate supports into partitions, and ordering the work around them.

A partition must be convex: no path may leave it and come back, or it could not run as one kernel call.
Each node gets a level: supported nodes even levels, the others odd, and a node's level is the smallest of
its parity not below any producer's level (plus one when the producer is of the other kind). Supported
nodes sharing a level form a partition; a path out of a partition and back in would have to climb at least
two levels, so every partition is convex (the same idea as TFLite's `PartitionGraphIntoIndependentNodeSubsets`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from .graph import Graph


@dataclass
class Partition:
    nodes: list[int]
    inputs: list[int] = field(default_factory=list)  # non-constant tensors read from outside
    outputs: list[int] = field(default_factory=list)  # tensors read outside or graph outputs


def select_partitions(delegate, graph: Graph, skip: set[int] | frozenset[int] = frozenset()
                      ) -> tuple[list[Partition], dict[int, str]]:
    """The partitions a SimpleDelegate takes, by the one policy both interpreters (ours and LiteRT's, through
    litert.py) follow: the nodes outside ``skip`` it supports, grouped by `group_supported`, less the partitions
    it declines as a whole (``partition_declined``), and where it limits them (``max_partitions``) the heaviest by
    ``partition_weight``, kept in execution order.
    Also returns node index -> why the delegate did not take it."""
    supported: set[int] = set()
    why_not: dict[int, str] = {}
    for node in graph.live_nodes:
        if node.index in skip:
            continue
        verdict = delegate.is_node_supported(node, graph)
        if verdict is True:
            supported.add(node.index)
        else:
            why_not[node.index] = verdict if isinstance(verdict, str) else "not supported"
    partitions = group_supported(graph, supported)
    declined = getattr(delegate, "partition_declined", None)
    if declined is not None:
        kept = []
        for p in partitions:
            why = declined([graph.nodes[i] for i in p.nodes], graph)
            if why:
                why_not.update(dict.fromkeys(p.nodes, why))
            else:
                kept.append(p)
        partitions = kept
    limit = getattr(delegate, "max_partitions", 0)
    if limit and len(partitions) > limit:
        weights = [delegate.partition_weight([graph.nodes[i] for i in p.nodes], graph) for p in partitions]
        keep = sorted(range(len(partitions)), key=lambda k: -weights[k])[:limit]
        partitions = [partitions[k] for k in sorted(keep)]
    return partitions, why_not


def group_supported(graph: Graph, supported: set[int]) -> list[Partition]:
    producers = graph.producers()
    level: dict[int, int] = {}
    for node in graph.live_nodes:
        mine = node.index in supported
        lvl = 0 if mine else 1
        for t in node.inputs:
            p = producers.get(t)
            if p is None:
                continue
            lvl = max(lvl, level[p] + ((p in supported) != mine))
        if (lvl % 2 == 0) != mine:
            lvl += 1
        level[node.index] = lvl
    # Then every node runs as late as its consumers allow, last node first: one with no producer (a DEQUANTIZE of
    # constant weights) or a chain from the graph's inputs (a text model's attention mask, built from the token
    # ids beside a CPU node that adjusts them) would otherwise sit at level 0, in a partition apart from the
    # nodes that read it. Raising a node keeps it at or above its producers' levels and below its consumers',
    # so the partitions stay convex.
    consumers = graph.consumers()
    for node in reversed(graph.live_nodes):
        mine = node.index in supported
        latest = [level[c] - ((c in supported) != mine) for t in node.outputs for c in consumers.get(t, [])]
        if latest:
            level[node.index] = max(level[node.index], min(latest))
    groups: dict[int, list[int]] = {}
    for n in graph.live_nodes:
        if n.index in supported:
            groups.setdefault(level[n.index], []).append(n.index)
    return [boundary(graph, nodes, consumers) for _, nodes in sorted(groups.items())]


def boundary(graph: Graph, nodes: list[int], consumers: dict[int, list[int]]) -> Partition:
    """The partition of ``nodes``, with the tensors it reads from outside and those read outside it or by the
    graph's caller; ``consumers`` is ``graph.consumers()``, computed once for all partitions."""
    inside = set(nodes)
    produced = {t for i in nodes for t in graph.nodes[i].outputs}
    inputs: dict[int, None] = {}  # ordered, and a membership test that does not scan
    for i in nodes:
        for t in graph.nodes[i].inputs:
            if t >= 0 and t not in produced and graph.tensors[t].data is None:
                inputs[t] = None
    graph_outputs = set(graph.outputs)
    outputs = [t for i in nodes for t in graph.nodes[i].outputs
               if t in graph_outputs or any(c not in inside for c in consumers.get(t, []))]
    return Partition(nodes, list(inputs), outputs)


def schedule(graph: Graph, partitions: list[Partition]) -> list[int | Partition]:
    """Execution order: CPU node indices and partitions, topologically sorted, earliest node first."""
    owner = {i: p for p in partitions for i in p.nodes}
    steps: list[int | Partition] = [n.index for n in graph.live_nodes if n.index not in owner] + list(partitions)
    step_of_node = {}
    for si, s in enumerate(steps):
        for i in (s.nodes if isinstance(s, Partition) else [s]):
            step_of_node[i] = si
    producers = graph.producers()
    deps: dict[int, set[int]] = {si: set() for si in range(len(steps))}
    for si, s in enumerate(steps):
        for i in (s.nodes if isinstance(s, Partition) else [s]):
            for t in graph.nodes[i].inputs:
                p = producers.get(t)
                if p is not None and step_of_node[p] != si:
                    deps[si].add(step_of_node[p])
    first = [min(s.nodes) if isinstance(s, Partition) else s for s in steps]
    users: dict[int, list[int]] = {si: [] for si in deps}
    for si, d in deps.items():
        for p in d:
            users[p].append(si)
    pending = {si: len(d) for si, d in deps.items()}
    heap = [(first[si], si) for si, c in pending.items() if c == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, si = heapq.heappop(heap)
        order.append(steps[si])
        for u in users[si]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(heap, (first[u], u))
    return order
