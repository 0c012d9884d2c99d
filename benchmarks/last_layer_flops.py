"""Matmul FLOPs of one training step with the last layer on the rows a loss reads (`models.last_layer`) and without.

    python benchmarks/last_layer_flops.py [--recipe bert-mini] [--examples 8] [--text FILE] [--full_only]

One forward and backward of the recipe's model (fixed seed, dropout as the recipe has it) on its first `--examples`
examples of the text (default ../shared/data/wikitext-2-raw/wiki.valid.raw), padding-free (`collators.flatten`, the
CPU's `sdpa_packed` attention), counted by `torch.utils.flop_counter.FlopCounterMode` (matmuls, batched matmuls and
attention), per real token: with the subset (the default) and without it (the computation of every commit before
it; `--full_only` runs that alone, so the same command runs on a checkout without `models.last_layer`). The
tokenizer is fixed: WordPiece over the text's `--vocab_size` most frequent lower-cased words (ties in alphabetical
order) and their letters, the same in every process (the WordPiece trainer breaks ties differently from one process
to the next).
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import BertTokenizer

from hf_bertology.collators.flatten import add_target_positions, flatten_batch
from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
from hf_bertology.recipes import get_recipe
from hf_bertology.training.attention import use_padding_free

DEFAULT_TEXT = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikitext-2-raw" / "wiki.valid.raw"
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def fixed_tokenizer(texts: list[str], size: int) -> BertTokenizer:
    counts = collections.Counter(word for text in texts for word in re.findall(r"\w+|[^\w\s]", text.lower()))
    letters = sorted({letter for word in counts for letter in word})
    room = size - len(SPECIALS) - 2 * len(letters)
    words = [word for word, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0])) if len(word) > 1]
    vocab = SPECIALS + letters + [f"##{letter}" for letter in letters] + sorted(words[:room])
    return BertTokenizer(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True)


def step_batch(recipe_name: str, text: Path, n_examples: int, vocab_size: int | None):
    recipe = get_recipe(recipe_name)
    corpus = load_corpus(train_files=[str(text)])
    tokenizer = fixed_tokenizer(corpus["text"], vocab_size or recipe.config.vocab_size)
    recipe.adapt_to_tokenizer(tokenizer)
    length = recipe.max_seq_length
    examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, length, 0)
    padded = recipe.build_collator(tokenizer, seed=0)([examples[i] for i in range(n_examples)])
    return recipe, flatten_batch(add_target_positions(padded))


def step_flops(model, batch) -> int:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    with FlopCounterMode(display=False) as counter:
        model(**batch).loss.backward()
    return counter.get_total_flops()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", default="bert-mini")
    parser.add_argument("--examples", type=int, default=8)
    parser.add_argument("--text", type=Path, default=DEFAULT_TEXT)
    parser.add_argument("--vocab_size", type=int, default=None, help="default: the preset's")
    parser.add_argument("--full_only", action="store_true", help="only the full last layer (any checkout)")
    args = parser.parse_args(argv)

    recipe, batch = step_batch(args.recipe, args.text, args.examples, args.vocab_size)
    tokens = int(batch["input_ids"].numel())  # a padding-free row: every token is real
    torch.manual_seed(0)
    model = use_padding_free(recipe.build_model()).train()
    result = {"recipe": args.recipe, "examples": args.examples, "real_tokens": tokens}
    settings = [("full", False)] if args.full_only else [("full", False), ("subset", True)]
    for name, enabled in settings:
        if not args.full_only:
            from hf_bertology.models.last_layer import use_last_layer_subset

            use_last_layer_subset(model, enabled)
        result[f"{name}_flops_per_token"] = step_flops(model, batch) / tokens
    print(f"{args.recipe}, {args.examples} examples, {tokens} real tokens, padding-free; matmul FLOPs per real token")
    print(f"  full last layer:   {result['full_flops_per_token']:,.0f}")
    if not args.full_only:
        result["reduction"] = 1 - result["subset_flops_per_token"] / result["full_flops_per_token"]
        print(f"  last-layer subset: {result['subset_flops_per_token']:,.0f}  ({result['reduction']:.1%} fewer)")
    return result


if __name__ == "__main__":
    main()
