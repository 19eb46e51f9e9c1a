"""TRANSPOSEs around a BATCH_MATMUL (an einsum's: heads to the front before the product, back after it) folded into
the product's reads and write: batch_matmul.dialect addresses its operands and its result through strides, so a
pure axis permutation costs no launch of its own.

A TRANSPOSE feeding an operand is folded when the product is the only reader of its output and the axis stored as
channels stays one of the operand's two matrix axes (the kernel reads 4 of them at once); one consuming the result
when it is the only reader of the result (or of a reshape of it to the same shape, which moved nothing) and
keeps the columns last (they are written 4 at once). The product then
reads the TRANSPOSE's input (``read_as``, ``read_transposed``), or writes the TRANSPOSE's output (``written_as``,
``write_transposed``); ops see both through LowerContext.input_transposed / output_transposed.
"""

from __future__ import annotations

from .view import PartitionView, PassResult

MATMULS = {"BATCH_MATMUL"}


def _perm(view: PartitionView, n: int) -> tuple[int, ...] | None:
    """The permutation of TRANSPOSE node ``n`` over its input's rank (negative axes counted from the end), or None
    when it is not a constant permutation."""
    node = view.graph.nodes[n]
    if len(node.inputs) < 2 or not view.is_const(node.inputs[1]):
        return None
    rank = len(view.shapes[view.node_inputs(n)[0]])
    values = view.graph.tensors[node.inputs[1]].data
    if values is None:
        return None
    perm = tuple(int(v) % rank if -rank <= int(v) < rank else -1 for v in values.reshape(-1))
    return perm if sorted(perm) == list(range(rank)) else None


def run(view: PartitionView) -> PassResult:
    result = PassResult("fuse_matmul_transpose")
    graph = view.graph
    readers, names, outputs = view.readers(), view.buffer_names(), set(view.outputs)
    transposes = {graph.nodes[n].outputs[0]: n for n in view.nodes if graph.nodes[n].op == "TRANSPOSE"}
    dropped: set[int] = set()
    for n in view.nodes:
        node = graph.nodes[n]
        if node.op not in MATMULS:
            continue
        ins = view.node_inputs(n)
        for slot in (0, 1):
            t = ins[slot]
            p = transposes.get(t)
            if p is None or p in dropped:
                continue
            perm = _perm(view, p)
            src = view.node_inputs(p)[0]
            rank = len(view.shapes[src])
            why_not = ""
            if perm is None or rank > 4 or len(view.shapes[t]) != rank:
                why_not = "its permutation is not a constant one over a tensor of rank <= 4"
            elif view.is_const(src):
                why_not = "it transposes a constant"
            elif ins.count(t) > 1 or view.buffer_readers(t, readers, names, outputs) != ([n], False):
                why_not = f"tensor {t} is read elsewhere too"
            elif rank - 1 not in perm[-2:]:
                why_not = "it moves the channels to a batch axis"
            if why_not:
                result.declined.append(f"{graph.nodes[p]} into {node}: {why_not}")
                continue
            assert perm is not None
            view.read_as[(n, slot)] = src
            view.read_transposed[(n, slot)] = perm
            readers[src] = [m for m in readers.get(src, []) if m != p] + [n]
            dropped.add(p)
            result.applied.append(f"{node} reads {graph.nodes[p]}'s input transposed by {list(perm)}")
        out = node.outputs[0]
        users, leaves = view.buffer_readers(out, readers, names, outputs)
        if leaves or len(users) != 1 or graph.nodes[users[0]].op != "TRANSPOSE":
            continue
        p = users[0]
        perm = _perm(view, p)
        read = view.node_inputs(p)[0]  # the result itself, or a dropped reshape of it to the same shape
        if view.shapes[read] != view.shapes[out]:
            result.declined.append(f"{graph.nodes[p]} after {node}: it reads the result reshaped")
            continue
        if perm is None or len(perm) > 4 or perm[-1] != len(perm) - 1:
            result.declined.append(f"{graph.nodes[p]} after {node}: it moves the columns off the channels")
            continue
        for alias in names.get(out, set()) - {out}:  # nothing reads them once the TRANSPOSE is gone
            del view.aliases[alias]
        view.written_as[out] = graph.nodes[p].outputs[0]
        view.write_transposed[n] = perm
        dropped.add(p)
        result.applied.append(f"{node} writes {graph.nodes[p]}'s output transposed by {list(perm)}")
    view.nodes = [n for n in view.nodes if n not in dropped]
    return result
