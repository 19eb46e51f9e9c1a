"""The exceptions a user of gpu_delegate can see."""


class ModelError(ValueError):
    """A .tflite file (or a graph built from one) is malformed or uses something nobody can run.

    The message names what is at fault: the file, the tensor, the node and its op.
    """


class ShapeError(ModelError):
    """The shapes of a model do not fit together for the input shapes given (found when shapes are propagated at
    allocation, so reported by allocate_tensors, as LiteRT does)."""


class DelegateError(RuntimeError):
    """A GPU backend could not be created, compile a kernel, or run a partition."""


# What a kernel, shape rule or support check raises when it trips over a malformed node or data the loader could
# not rule out. Callers turn these into a ModelError naming the node (never a bare traceback from inside a kernel).
KERNEL_FAULTS: tuple[type[Exception], ...] = (ValueError, IndexError, KeyError, ZeroDivisionError, TypeError,
                                              AttributeError, OverflowError)
# ... and with the ModelErrors a check raises on purpose: everything that says "this node is malformed"
MODEL_FAULTS: tuple[type[Exception], ...] = (ModelError, *KERNEL_FAULTS)


class DataDependentShape(Exception):
    """Raised by an op's shape rule when an output's shape depends on the values of an input that is not known
    before invoke (not a constant, not folded at allocation): the output is then a dynamic tensor, as in LiteRT.
    Internal; never reaches the user."""
