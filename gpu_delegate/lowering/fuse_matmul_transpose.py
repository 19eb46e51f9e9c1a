"""The TRANSPOSEs and RESHAPEs around a BATCH_MATMUL (an einsum's: the channels split into heads and moved to the
front before the product, moved back and merged after it) folded into the product's reads and write:
batch_matmul.dialect addresses its operands and its result through strides, so they cost no launch of their own.

Read side: a TRANSPOSE feeding an operand is folded when the product is the only reader of its output and the axis
stored as channels stays one of the operand's two matrix axes (the kernel reads 4 of them at once); then a RESHAPE
feeding what the product reads, when the product is its only reader and it splits the channels in two, the inner
part a multiple of 4 (a slice of 4 channels stays one vec4). Write side: a TRANSPOSE that is the only reader of the
result (or of a reshape of it to the same shape, which moved nothing) and keeps the columns last; then a RESHAPE that
is the only reader of what the product writes and merges its last two axes into the channels, the inner one a
multiple of 4. The product then reads the RESHAPE's input or writes the RESHAPE's output (``read_as``,
``written_as``) through ``read_transposed`` / ``write_transposed``; ops see both through
LowerContext.input_transposed / output_transposed.
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


def splits_channels(whole: tuple[int, ...], split: tuple[int, ...]) -> bool:
    """Whether ``split`` is ``whole`` with its channels split in two, the inner part a multiple of 4, rank <= 4."""
    return len(split) == len(whole) + 1 <= 4 and split[:-2] == whole[:-1] and split[-2] * split[-1] == whole[-1] and \
        split[-1] % 4 == 0


def run(view: PartitionView) -> PassResult:
    result = PassResult("fuse_matmul_transpose")
    graph = view.graph
    readers, names, outputs = view.readers(), view.buffer_names(), set(view.outputs)
    producer = {graph.nodes[n].outputs[0]: n for n in view.nodes if graph.nodes[n].op in ("TRANSPOSE", "RESHAPE")}
    dropped: set[int] = set()

    def only_reader(t: int, n: int) -> bool:
        return view.buffer_readers(t, readers, names, outputs) == ([n], False)

    def drop(p: int, src: int, n: int) -> None:
        readers[src] = [m for m in readers.get(src, []) if m != p] + [n]
        dropped.add(p)

    for n in view.nodes:
        node = graph.nodes[n]
        if node.op not in MATMULS:
            continue
        ins = view.node_inputs(n)
        for slot in (0, 1):
            t = ins[slot]
            if ins.count(t) > 1:
                continue
            seen, perm, read = view.shapes[t], tuple(range(len(view.shapes[t]))), t
            p = producer.get(t)
            if p is not None and p not in dropped and graph.nodes[p].op == "TRANSPOSE":
                p_perm = _perm(view, p)
                src = view.node_inputs(p)[0]
                rank = len(view.shapes[src])
                why_not = ""
                if p_perm is None or rank > 4 or len(view.shapes[t]) != rank:
                    why_not = "its permutation is not a constant one over a tensor of rank <= 4"
                elif view.is_const(src):
                    why_not = "it transposes a constant"
                elif not only_reader(t, n):
                    why_not = f"tensor {t} is read elsewhere too"
                elif rank - 1 not in p_perm[-2:]:
                    why_not = "it moves the channels to a batch axis"
                if why_not:
                    result.declined.append(f"{graph.nodes[p]} into {node}: {why_not}")
                    continue
                assert p_perm is not None
                seen, perm, read = view.shapes[src], p_perm, src
                drop(p, src, n)
                result.applied.append(f"{node} reads {graph.nodes[p]}'s input transposed by {list(perm)}")
            r = producer.get(read)
            if r is not None and r not in dropped and graph.nodes[r].op == "RESHAPE":
                src = view.node_inputs(r)[0]
                if not view.is_const(src) and only_reader(read, n) and splits_channels(view.shapes[src], seen):
                    read = src
                    drop(r, src, n)
                    result.applied.append(f"{node} reads {graph.nodes[r]}'s input with its channels split")
            if read != t:
                view.read_as[(n, slot)] = read
                view.read_transposed[(n, slot)] = (tuple(seen), tuple(perm))
        out = node.outputs[0]
        seen, perm, written = view.shapes[out], tuple(range(len(view.shapes[out]))), out
        users, leaves = view.buffer_readers(out, readers, names, outputs)
        if not leaves and len(users) == 1 and graph.nodes[users[0]].op == "TRANSPOSE":
            p = users[0]
            p_perm = _perm(view, p)
            if view.shapes[view.node_inputs(p)[0]] != view.shapes[out]:
                result.declined.append(f"{graph.nodes[p]} after {node}: it reads the result reshaped")
            elif p_perm is None or len(p_perm) > 4 or p_perm[-1] != len(p_perm) - 1:
                result.declined.append(f"{graph.nodes[p]} after {node}: it moves the columns off the channels")
            else:
                for alias in names.get(out, set()) - {out}:  # nothing reads them once the TRANSPOSE is gone
                    del view.aliases[alias]
                written, perm = graph.nodes[p].outputs[0], p_perm
                seen = view.shapes[written]
                dropped.add(p)
                result.applied.append(f"{node} writes {graph.nodes[p]}'s output transposed by {list(perm)}")
        users, leaves = view.buffer_readers(written, readers, names, outputs)
        if not leaves and len(users) == 1 and graph.nodes[users[0]].op == "RESHAPE" and \
                view.node_inputs(users[0])[0] == written and written not in names:
            r = users[0]
            merged = graph.nodes[r].outputs[0]
            if splits_channels(view.shapes[merged], seen):
                written = merged
                dropped.add(r)
                result.applied.append(f"{node} writes {graph.nodes[r]}'s output, its last two axes merged")
        if written != out:
            view.written_as[out] = written
            view.write_transposed[n] = (tuple(seen), tuple(perm))
    view.nodes = [n for n in view.nodes if n not in dropped]
    return result
