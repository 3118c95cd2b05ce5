"""The `vdnnsim` command: thin commands over the library."""

from .app import build_parser, main

__all__ = ["build_parser", "main"]
