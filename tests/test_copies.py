"""`utils/check_copies.py`: every `# Copied from` block in src/ equals its source, and a drifted copy is caught."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKER = ROOT / "utils" / "check_copies.py"


def run_checker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECKER), *args], capture_output=True, text=True, timeout=60)


def test_marked_copies_equal_their_sources():
    result = run_checker()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "marked copies, all equal" in result.stdout


def drifted_tree(tmp_path: Path, relative: str, old: str, new: str) -> tuple[Path, Path]:
    """A copy of src/ with `old` replaced once by `new` in `relative` (a file under src/hf_bertology/models)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "hf_bertology", src / "hf_bertology", ignore=shutil.ignore_patterns("__pycache__"))
    path = src / "hf_bertology" / "models" / relative
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} should stand once in {relative}"
    path.write_text(text.replace(old, new))
    return src, path


def test_a_drifted_function_copy_is_reported_and_fixed(tmp_path):
    src, path = drifted_tree(
        tmp_path, "modeling_albert.py", "return local_count.clamp(min=1)", "return local_count.clamp(min=2)"
    )
    result = run_checker("--src", str(src))
    assert result.returncode == 1
    line = path.read_text().splitlines().index("# Copied from hf_bertology.models.modeling_bert._denominator") + 1
    assert f"{path}:{line}: differs from hf_bertology.models.modeling_bert._denominator" in result.stdout
    assert "+        return local_count.clamp(min=2)" in result.stdout  # the short diff shows the drifted line

    assert run_checker("--src", str(src), "--fix_and_overwrite").returncode == 0
    original = ROOT / "src" / "hf_bertology" / "models" / "modeling_albert.py"
    assert path.read_text() == original.read_text()
    assert run_checker("--src", str(src)).returncode == 0


def test_a_drifted_source_is_reported_at_every_copy(tmp_path):
    # the source changes, the copies (electra's `keyed_uniform` stands in deberta_v3 and composed) do not
    src, _ = drifted_tree(tmp_path, "modeling_electra.py", "x = (x ^ shift(x, 30)) * mix1", "x = x * mix1")
    result = run_checker("--src", str(src))
    assert result.returncode == 1
    assert "models/modeling_deberta_v3.py" in result.stdout and "models/rtd_composed.py" in result.stdout
    assert result.stdout.count(": differs from hf_bertology.models.modeling_electra.keyed_uniform") == 2


def test_a_drifted_block_copy_is_reported_and_fixed(tmp_path):
    # a block inside a method: ALBERT's sparse MLM loss, a copy of BERT's with `with ...` replacements
    src, path = drifted_tree(
        tmp_path,
        "modeling_albert.py",
        'mlm_loss = mlm_sum / _denominator(num_items_in_batch, "labels", n_tokens, n_tokens)',
        "mlm_loss = mlm_sum / n_tokens",
    )
    result = run_checker("--src", str(src))
    assert result.returncode == 1
    assert "BertologyBertForPreTraining.forward[losses_and_output]" in result.stdout
    assert "+            mlm_loss = mlm_sum / n_tokens" in result.stdout
    assert result.stdout.count(": differs from") == 1  # the other blocks of the file still match
    assert run_checker("--src", str(src), "--fix_and_overwrite").returncode == 0
    original = ROOT / "src" / "hf_bertology" / "models" / "modeling_albert.py"
    assert path.read_text() == original.read_text()


def test_a_block_marker_without_its_source_block_is_reported(tmp_path):
    src, _ = drifted_tree(tmp_path, "modeling_bert.py", "# End copy source: losses_and_output", "# (removed)")
    result = run_checker("--src", str(src))
    assert result.returncode == 1
    assert "needs one `# Copy source: losses_and_output`" in result.stdout
