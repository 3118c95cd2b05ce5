"""A few keys of each run of a config, exact: python experiments/examples/compact.py CONFIG"""

import sys

from vdnnsim.api import run_config
from vdnnsim.config import load_config

cfg, base = load_config(sys.argv[1])
for r in run_config(cfg, base):
    s = r.summary()
    print(f"{s['policy']:12s} fits={str(s['fits']):5s} peak={s['peak_memory_bytes']:8d} B  "
          f"iter={s['iteration_time_s'] * 1e6:6.1f} us  offloaded={s['offloaded_bytes']:6d} B  "
          f"oom={s['oom_tensor']}")
