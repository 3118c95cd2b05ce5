"""Imported by the fork server that starts the fuzzer's workers (campaign.run_campaign):
the workers are forked from a process that has imported vdnnsim and its dependencies
and started no thread."""

from .campaign import preload

preload()
