"""ModernBERT-large started from a trained ModernBERT-base, as the official large run (docs/recipes/modernbert.md):
the base weights tiled from the middle into the large shapes (`hf_bertology.models.tiling`).

    python examples/init_large_from_base.py runs/modernbert-base runs/modernbert-large-init
    bertology pretrain --recipe modernbert-large --model_name_or_path runs/modernbert-large-init \\
        --tokenizer_name runs/modernbert-large-init --train_file corpus.txt --output_dir runs/modernbert-large
"""

import sys

from transformers import AutoTokenizer

import hf_bertology as hb
from hf_bertology.models.tiling import init_from_base

if __name__ == "__main__":
    base_folder, output_dir, *rest = sys.argv[1:]
    recipe = hb.get_recipe(rest[0] if rest else "modernbert-large")
    base = hb.BertologyModernBertForPreTraining.from_pretrained(base_folder)
    tokenizer = AutoTokenizer.from_pretrained(base_folder)
    recipe.adapt_to_tokenizer(tokenizer)  # the base's special ids
    recipe.config.vocab_size = base.config.vocab_size  # and its embedding table's size
    large = init_from_base(base, recipe.build_model())
    large.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
