"""The package version: part of every cache entry's header."""
__version__ = "0.1.0"
