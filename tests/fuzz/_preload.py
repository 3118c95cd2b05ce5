"""Imported by the fork server that starts the fuzzer's workers (campaign.run_campaign):
the workers are forked from a process that has imported vdnnsim and its dependencies
and started no thread. Their cases call ``vdnnsim.cli.main`` one after another, and the
command line's parser is built once here, as a vdnnsim process builds it once: a parse
changes nothing of it (the oracle's ``parse_argv`` reuses one too), and building it took
a fifth of a case's time."""

import functools

import vdnnsim.cli

from .campaign import preload

preload()
vdnnsim.cli.build_parser = functools.cache(vdnnsim.cli.build_parser)
