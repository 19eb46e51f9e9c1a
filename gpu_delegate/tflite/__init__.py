"""Reading and writing .tflite flatbuffers."""

from .reader import read_model
from .writer import ModelBuilder

__all__ = ["ModelBuilder", "read_model"]
