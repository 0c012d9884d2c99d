"""Several `bertology pretrain` runs in one launch (each launch costs seconds), for tests/test_multiprocess.py:

    torchrun --nproc_per_node N tests/runs_worker.py SPEC.json

SPEC: {"runs": [[ARG, ...], ...], "result": path}. Each run's exit status; rank 0 writes the list to SPEC["result"].
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys

from hf_bertology import cli


def main() -> None:
    faulthandler.dump_traceback_later(600, exit=True)  # a stuck collective prints its stacks and exits
    spec = json.loads(open(sys.argv[1]).read())
    statuses = [cli.main(["pretrain", *argv]) for argv in spec["runs"]]
    if int(os.environ.get("RANK", "0")) == 0:
        with open(spec["result"], "w") as handle:
            json.dump(statuses, handle)


if __name__ == "__main__":
    main()
