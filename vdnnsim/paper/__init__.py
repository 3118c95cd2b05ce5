"""Reproducing the vDNN paper: its headline numbers beside vdnnsim's. See
docs/reproduction.md."""

from .claims import CLAIMS, Claim
from .reproduce import reproduce, table_markdown

__all__ = ["CLAIMS", "Claim", "reproduce", "table_markdown"]
