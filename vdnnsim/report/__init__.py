"""Human-readable output: tables (and, later, figures and Chrome traces)."""

from .table import format_table

__all__ = ["format_table"]
