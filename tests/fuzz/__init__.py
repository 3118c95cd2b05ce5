"""The vdnnsim fuzzer: a seeded, deterministic generator of hostile inputs (``generator``),
the contract every case is checked against (``oracle``) and a campaign runner that runs
cases in worker processes with a per-case timeout (``campaign``).

NOTE [fuzz contract]
For every case, run in-process (``vdnnsim.cli.main(argv)`` or a direct API call):

* exit code 0: the output is sane (records pass the checks in ``oracle.check_record``) and
  whatever the command was asked to write exists and parses;
* exit code 2: stderr is one line ``vdnnsim: error: ...`` (argparse's own errors read
  ``vdnnsim SUBCOMMAND: error: ...``), naming the file when the bad input came from one;
  no traceback; nothing on stdout; nothing written (no output, no partial or temporary
  file);
* an API call raises a ``vdnnsim.VdnnError`` or returns a sane result;
* anything else is a failure: an exception escaping ``main``, another exit code, a case
  running over the timeout (10 s), a wrong answer with exit code 0.

Case ``i`` of seed ``s`` depends on ``(s, i)`` only, so any case can be regenerated alone:
``python bench/fuzz.py --seed S --case I``.
"""

from .campaign import Failure, run_campaign
from .generator import Case, generate

__all__ = ["Case", "Failure", "generate", "run_campaign"]
