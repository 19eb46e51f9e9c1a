"""The test suite, a package: modules import shared helpers as ``from .reference import ...``."""
