"""What TFLite's GPU delegate tells the user when part of a model stays on the CPU, once per model, at WARNING:
each op it left there with the reason, then how many operations run on the GPU and how many on the CPU.

The interpreter's planning step calls ``cpu_fallback_summary`` with where each node runs and why, and logs the
text (if any) on the "gpu_delegate" logger at WARNING, which reaches stderr by Python's default handler.
"""

from __future__ import annotations

from collections.abc import Mapping

from .graph import Graph

CPU, FOLDED = "cpu", "folded"


def cpu_fallback_summary(graph: Graph, backend_of: Mapping[int, str], reasons: Mapping[int, str]) -> str:
    """The warning for ``graph`` whose node i runs on ``backend_of[i]`` ("cpu" where absent), ``reasons[i]`` saying
    why a CPU node is there; "" when every node runs on a GPU backend (or none does: no delegate was asked)."""
    running = [n for n in graph.nodes if backend_of.get(n.index, CPU) != FOLDED]  # folded: computed at allocation
    on_cpu = [n for n in running if backend_of.get(n.index, CPU) == CPU]
    if not on_cpu or len(on_cpu) == len(running):
        return ""
    by_cause: dict[tuple[str, str], list[int]] = {}
    left_out: list[int] = []  # supported, but in a partition the delegate did not keep (max_delegated_partitions)
    for node in on_cpu:
        if node.index not in reasons:
            left_out.append(node.index)
            continue
        label = f"CUSTOM {node.op}" if node.custom else node.op
        by_cause.setdefault((label, reasons[node.index]), []).append(node.index)
    lines = ["Following operations are not supported by GPU delegate:"] if by_cause else []
    for (label, why), nodes in by_cause.items():
        lines.append(f"{label}: {why} ({_nodes(nodes)})")
    if left_out:
        lines.append(f"{len(left_out)} supported operations run on the CPU: their partitions are beyond "
                     f"max_delegated_partitions ({_nodes(left_out)})")
    n_gpu = len(running) - len(on_cpu)
    lines.append(f"{n_gpu} operations will run on the GPU, and the remaining {len(on_cpu)} operations will run on "
                 "the CPU.")
    return "\n".join(lines)


def _nodes(indices: list[int]) -> str:
    shown = ", ".join(map(str, indices[:8])) + (", ..." if len(indices) > 8 else "")
    return f"node{'s' if len(indices) > 1 else ''} {shown}"
