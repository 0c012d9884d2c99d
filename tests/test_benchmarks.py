"""The benchmark commands the README quotes run as written (at a tiny size) and print what the README says."""

from __future__ import annotations

import json
import subprocess

from platform_support import PYTHON, REPO, subprocess_env


def test_step_cost_counts_host_syncs_ours_against_plain(tmp_path, corpus_file):
    """`benchmarks/step_cost.py --vs_plain --count_syncs` (the README's command, a tiny recipe): no sync in our
    Trainer steps, some in plain transformers' (its NaN filter, token count and SDPA mask check)."""
    rows_file = tmp_path / "rows.json"
    done = subprocess.run(
        [PYTHON, str(REPO / "benchmarks" / "step_cost.py"), "--vs_plain", "--count_syncs", "--recipes", "bert-tiny",
         "--batch_size", "4", "--seq_len", "32", "--steps", "3", "--workers", "0", "--text", str(corpus_file),
         "--json", str(rows_file)],
        env=subprocess_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    rows = {row["which"]: row for row in json.loads(rows_file.read_text())}
    assert rows["ours"]["syncs_per_step"] == 0 and rows["ours"]["padding_free"], rows["ours"]
    assert rows["plain"]["syncs_per_step"] >= 2, rows["plain"]
    assert any("_track_num_input_tokens" in site for site in rows["plain"]["sync_sites"]), rows["plain"]
    assert "| bert-tiny | ours | 4×32 | yes | 0 | — |" in done.stdout
