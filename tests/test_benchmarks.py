"""The benchmark command the README quotes for host syncs runs as written and prints the README's table."""

from __future__ import annotations

import re
import shlex
import subprocess

from platform_support import PYTHON, REPO, subprocess_env

COMMAND = re.compile(r"^python (benchmarks/step_cost\.py --vs_plain --count_syncs .*)$", re.MULTILINE)
# transformers' own modeling code: the only files where a step of ours may still sync
TRANSFORMERS_SITES = {"modernbert-mini": "masking_utils.py", "xlnet-mini": "modeling_xlnet.py"}


def readme_command() -> list[str]:
    (line,) = COMMAND.findall((REPO / "README.md").read_text())
    return [PYTHON, *shlex.split(line)]


def test_readme_host_sync_command_as_written(shared_data):
    """The README's line, from the repo root: no sync in our steps but the two in transformers' ModernBERT and
    XLNet code, and plain transformers' steps with theirs (the NaN filter, the token count, the mask check)."""
    done = subprocess.run(
        readme_command(), cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-4000:]
    rows = {}
    for line in done.stdout.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 6 and cells[1] in ("ours", "plain"):
            rows[cells[0], cells[1]] = (float(cells[4]), cells[5])
    recipes = {recipe for recipe, _ in rows}
    assert len(recipes) == 8 and rows.keys() >= {("bert-mini", "plain"), ("roberta-mini", "plain")}, rows
    for (recipe, run), (syncs, where) in rows.items():
        if run == "plain":
            assert syncs >= 3 and "_track_num_input_tokens" in where and "_run_epoch" in where, (recipe, where)
        elif recipe in TRANSFORMERS_SITES:
            assert syncs == 2 and where.count(TRANSFORMERS_SITES[recipe]) == 1 and ";" not in where, (recipe, where)
        else:
            assert syncs == 0 and where == "—", (recipe, where)
