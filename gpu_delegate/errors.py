"""The exceptions a user of gpu_delegate can see."""


class ModelError(ValueError):
    """A .tflite file (or a graph built from one) is malformed or uses something nobody can run.

    The message names what is at fault: the file, the tensor, the node and its op.
    """


class DelegateError(RuntimeError):
    """A GPU backend could not be created, compile a kernel, or run a partition."""
