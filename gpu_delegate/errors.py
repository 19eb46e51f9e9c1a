"""The exceptions a user of gpu_delegate can see."""


class ModelError(ValueError):
    """A .tflite file (or a graph built from one) is malformed or uses something nobody can run.

    The message names what is at fault: the file, the tensor, the node and its op.
    """


class DelegateError(RuntimeError):
    """A GPU backend could not be created, compile a kernel, or run a partition."""


# What a kernel, shape rule or support check raises when it trips over a malformed node or data the loader could
# not rule out. Callers turn these into a ModelError naming the node (never a bare traceback from inside a kernel).
KERNEL_FAULTS: tuple[type[Exception], ...] = (ValueError, IndexError, KeyError, ZeroDivisionError, TypeError,
                                              AttributeError, OverflowError)
