"""The package version: cache files and program binaries are keyed by it."""

__version__ = "0.1.0"
