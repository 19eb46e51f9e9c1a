"""gpu_delegate: run TensorFlow Lite models on OpenCL / OpenGL ES 3.1 compute kernels, in Python."""

from .delegate import DelegateKernel, SimpleDelegate
from .errors import DelegateError, ModelError
from .gpu import GpuDelegate
from .interpreter import Interpreter
from .load import load_delegate
from .version import __version__

__all__ = ["Interpreter", "GpuDelegate", "SimpleDelegate", "DelegateKernel", "ModelError", "DelegateError",
           "load_delegate", "__version__"]
