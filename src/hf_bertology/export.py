"""`bertology export`: write one network of a joint checkpoint as a plain `transformers` folder.

    bertology export --part discriminator runs/electra-small runs/electra-small-discriminator
    bertology export --part generator runs/deberta-v3-base runs/deberta-v3-base-generator

The checkpoint's config.json says which joint model it holds (ELECTRA, DeBERTa-v3, an RTD objective on another
encoder); the networks and their plain classes are its variant's (`Variant.networks`), the work `joint.export_part`'s.
`--electra-part` and `--deberta-v3-part` are the old names of `--part`. docs/loading.md: what the folders hold.
"""

from __future__ import annotations

import argparse
import sys

from .joint import check_target, export_part
from .recipes.recipe import VARIANTS
from .utils import logger, refuse_same_folder, run_command, set_verbosity

# the flags of the time when each joint family had its own export: other names of --part
OLD_FLAGS = {
    "electra_part": ("--electra-part", "--electra_part"),
    "deberta_v3_part": ("--deberta-v3-part", "--deberta_v3_part"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bertology export", description="Write one network of a joint checkpoint as a vanilla folder."
    )
    parts = sorted({network.name for variant in VARIANTS.values() for network in variant.networks})
    parser.add_argument(
        "--part",
        choices=parts,
        default=None,
        help="which network to write: the discriminator (the one to fine-tune) or the generator (a masked LM)",
    )
    for dest, flags in OLD_FLAGS.items():
        parser.add_argument(*flags, dest=dest, choices=parts, default=None, help="old name of --part")
    parser.add_argument("checkpoint", help="folder written by `bertology pretrain` with two networks")
    parser.add_argument("output_dir", help="folder to write (new, or without a model in it)")
    parser.add_argument("--overwrite", action="store_true", help="replace a model already in output_dir")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    given = {"--part": args.part, **{flags[0]: getattr(args, dest) for dest, flags in OLD_FLAGS.items()}}
    given = {flag: part for flag, part in given.items() if part is not None}
    if len(given) != 1:
        parser.error(f"give --part once ({' or '.join(parts)})")
    ((flag, part),) = given.items()
    refuse_same_folder(args.checkpoint, args.output_dir, "bertology export")
    check_target(args.output_dir, args.overwrite)
    set_verbosity()
    if flag != "--part":
        logger.warning("%s is the old name of --part", flag)
    export_part(args.checkpoint, args.output_dir, part)
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
