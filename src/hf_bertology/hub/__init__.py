"""Hub-format folders: what `bertology pretrain` leaves behind, and its model card.

A folder holds `config.json` (the family's `model_type` plus an `auto_map` naming our pretraining class),
`model.safetensors`, the tokenizer, our modeling code (copied by `save_pretrained` for `trust_remote_code=True`)
and a `README.md` model card. Plain `transformers` loads it without us: `architectures` names its own class, the
weights hold every backbone parameter that class has. A joint run (two networks) adds vanilla `discriminator/` and
`generator/` folders, each with its own card (`write_part_card`); the joint folder itself has a `model_type` of its
own, which plain `transformers` refuses (models/configuration_electra.py). docs/loading.md: which folder for
which client.

One module a job: folders.py (`save_folder`), cards.py (the model cards), push.py (the Hub), command.py
(`bertology push`). This face names what users call; the package's own modules import from those.
"""

from .cards import card_for_repo, write_model_card, write_part_card
from .folders import complete_backbone, plain_class_of, save_folder
from .push import keep_token_out_of_files, push_folder, push_from_training_args

__all__ = [
    "card_for_repo",
    "complete_backbone",
    "keep_token_out_of_files",
    "plain_class_of",
    "push_folder",
    "push_from_training_args",
    "save_folder",
    "write_model_card",
    "write_part_card",
]
