"""One policy's record of a config, as `vdnnsim run CONFIG --json` prints it:
python experiments/examples/record.py CONFIG POLICY"""

import json
import sys

from vdnnsim.api import run_config
from vdnnsim.config import load_config

cfg, base = load_config(sys.argv[1])
cfg = cfg.model_copy(update={"policy": sys.argv[2], "policies": None})
print(json.dumps(run_config(cfg, base)[0].summary(), indent=2))
