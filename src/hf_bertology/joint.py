"""A joint model's networks (the `Network`s its variant declares: a generator and a discriminator trained together)
as plain `transformers` models and folders: one network written alone (`plain_part`, `export_part`), two released
networks read into a joint model (`load_parts`), a joint run's `discriminator/` and `generator/` folders
(`write_part_folders`), and the config a joint folder's tokenizer is read with (`joint_config`). Every function
is given the declaration (`Recipe.networks`; a folder's: `recipes.kind_of`, asked once at `export_part`'s top) and
branches on no family; `bertology export` is export.py."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

import torch
from transformers import AutoTokenizer

from .hub.cards import write_part_card
from .hub.folders import complete_backbone
from .recipes.base import Network
from .recipes.networks import Kind, kind_of, network
from .utils import BertologyError, logger

MODEL_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "config.json")


def check_target(output_dir: str | Path, overwrite: bool = False) -> None:
    """The folder to export into: a path that is a file, or a folder that already holds a model, is refused before
    any work (`save_pretrained` would replace its weights silently); `overwrite` allows the second."""
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise BertologyError(f"{output_dir} is a file, not a folder: give a folder to export into")
    held = [name for name in MODEL_FILES if (output_dir / name).is_file()]
    if held and not overwrite:
        raise BertologyError(
            f"{output_dir} already holds a model ({', '.join(held)}): choose another folder, or pass --overwrite "
            "to replace it"
        )


def _write(model, checkpoint: Path, output_dir: Path, tokenizer=None) -> Path:
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir, safe_serialization=True)
    # a masked-LM generator (RoBERTa's, BERT's, ALBERT's) has no pooler and its family's AutoModel has one: the
    # seeded pooler the discriminator ships too, so that every load gives the same network
    complete_backbone(model, output_dir)
    try:
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(checkpoint, config=joint_config(checkpoint))
        tokenizer.save_pretrained(output_dir)
    except (OSError, ValueError):
        logger.warning("no tokenizer in %s: %s holds only the model", checkpoint, output_dir)
    return output_dir


def _auto_map_class(checkpoint: Path) -> str:
    """The pretraining class `checkpoint`'s config.json names; a folder without a readable one is one error line."""
    try:
        config = json.loads((checkpoint / "config.json").read_text())
    except (OSError, ValueError):
        raise BertologyError(f"{checkpoint} is not a checkpoint folder (no readable config.json)") from None
    return config.get("auto_map", {}).get("AutoModelForPreTraining", "")


# Parameters a plain class has and the pretraining objective never trains (a pooler no loss reaches): kept at the
# plain class's own initialisation, drawn from a fixed seed, so every load of the folder gives the same network.
UNTRAINED = (".pooler.",)


def fill_by_name(model, state: dict, prefix: str, rename: dict[str, str] | None = None) -> list[str]:
    """Load every parameter of the plain `model` from `state[prefix + name]` (`rename` maps the plain class's names
    to the joint model's where they differ). Driven by the plain class's names, so modules that only the joint
    model has (an extra generator head, GDES's Δ) are left out and returned; a parameter the plain class needs and
    the joint model lacks stops the export, unless the objective never trains it (`UNTRAINED`): that one keeps the
    model's (seeded) initialisation."""

    def source(name: str) -> str:
        return _joint_name(name, prefix, rename)

    wanted = {name: state[source(name)] for name in model.state_dict() if source(name) in state}
    absent = [n for n in model.state_dict() if n not in wanted and not any(u in f".{n}" for u in UNTRAINED)]
    if absent:
        raise BertologyError(f"the joint model has no weights for the plain {type(model).__name__}: {absent[:3]}")
    model.load_state_dict(wanted, strict=False)
    used = {source(name) for name in wanted}
    return sorted(k for k in state if k.startswith(prefix) and k not in used)


def _seeded(build):
    """`build()` under a fixed seed, leaving the global random state as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return build()


def _joint_name(name: str, prefix: str, rename: dict[str, str] | None) -> str:
    """Where the plain part's weight `name` lives in the joint model."""
    old = next((old for old in rename or {} if name.startswith(old)), None)
    return prefix + (rename[old] + name[len(old) :] if old is not None else name)


def plain_part(joint, declared: Network, networks: tuple[Network, ...]):
    """Network `declared` (one of `networks`, the joint model's) of a loaded joint model as the plain `transformers`
    class a user loads (`Network.plain_class`), with its weights."""
    model = _seeded(lambda: declared.plain_class(declared.plain_config(joint)))
    # the weights under this network's prefix that are another network's (ELECTRA's discriminator is at the top)
    others = tuple(n.prefix for n in networks if n.prefix != declared.prefix)
    others = tuple(prefix for prefix in others if prefix.startswith(declared.prefix))
    state = {k: v for k, v in joint.state_dict().items() if not k.startswith(others)}
    # the joint state dict names shared tables under every module that uses them and merges GDES's E_G + Δ
    left_out = fill_by_name(model, state, declared.prefix, declared.rename)
    if left_out:
        logger.info("the plain %s has no place for %s", declared.plain_class.__name__, ", ".join(left_out[:5]))
    return model


# a model folder's weights, in the order transformers looks for them (sharded: an index names the shards)
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def _fetch(source: str | Path, name: str) -> Path | None:
    """File `name` of `source` (a folder, or a Hub id fetched into the cache as transformers fetches it), or None."""
    if Path(source).is_dir():
        return Path(source) / name if (Path(source) / name).is_file() else None
    from transformers.utils import cached_file

    try:
        found = cached_file(str(source), name, _raise_exceptions_for_missing_entries=False)
    except OSError as err:
        raise BertologyError(f"{source}: no such folder, and not on the Hub ({str(err).splitlines()[0]})") from None
    return Path(found) if found else None


def weight_files(source: str | Path) -> list[Path]:
    """The files that hold `source`'s weights: the first of `WEIGHT_FILES` it has (an index: its shards). A folder
    with none, or an unreadable index, is one error line."""
    for name in WEIGHT_FILES:
        path = _fetch(source, name)
        if path is None:
            continue
        if not name.endswith(".index.json"):
            return [path]
        try:
            shards = sorted(set(json.loads(path.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise BertologyError(
                f"{path} cannot be read (not a shard index): a damaged download; fetch it again"
            ) from None
        found = [_fetch(source, shard) for shard in shards]
        if None in found:
            raise BertologyError(f"{source} lacks {shards[found.index(None)]}, a shard its {name} names")
        return found
    where = "" if Path(source).is_dir() else " in the Hub cache or on the Hub (offline, or no such repository?)"
    raise BertologyError(f"{source} holds no weights{where} (none of {', '.join(WEIGHT_FILES)})")


def _read_file(path: Path, header_only: bool = False) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    try:
        if path.suffix == ".safetensors":  # its header states every tensor's bytes: a cut file fails to open
            with safe_open(path, "pt") as handle:
                return {} if header_only else {name: handle.get_tensor(name) for name in handle.keys()}
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, Mapping):
            raise ValueError(f"it holds a {type(state).__name__}, not a state dict")
        return dict(state)
    except Exception as err:  # safetensors' SafetensorError, torch's zip reader's RuntimeError, a pickle error
        reason = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"
        raise BertologyError(
            f"{path} cannot be read ({reason}): a truncated or damaged file; fetch it again"
        ) from None


def check_weights(source: str | Path) -> None:
    """One error line, before any folder is written, when a local model folder's weight files cannot be read (a cut
    download): transformers would stop later with a traceback."""
    if Path(source).is_dir():
        for path in weight_files(source):
            _read_file(path, header_only=True)


def read_weights(source: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of `source`'s weight files by its saved name: what a plain class's load would drop as well (a
    released DeBERTa-v3's RTD head and EMD positions)."""
    state = {}
    for path in weight_files(source):
        state.update(_read_file(path))
    return state


def _places(declared: Network, networks: tuple[Network, ...]) -> tuple[str, tuple[str, ...]]:
    """(where network `declared`'s released files put their names from, the other networks' prefixes under it):
    a base model's weights sit under its prefix (a `DebertaV2Model` folder names `encoder.*`, microsoft's file
    `deberta.encoder.*` beside `mask_predictions.*`), any other's under the network's own prefix."""
    base = declared.plain_class.base_model_prefix + "."
    root = declared.prefix[: -len(base)] if declared.prefix.endswith(base) else declared.prefix
    others = tuple(n.prefix for n in networks if n.prefix not in ("", declared.prefix) and n.prefix.startswith(root))
    return root, others


def place_released(declared: Network, networks: tuple[Network, ...], state: Mapping, params: Mapping) -> dict:
    """{released name: the joint model's} for every tensor of network `declared`'s released `state` that the joint
    model (`params`: its state dict) has a place for: the plain class's names (`rename`: DeBERTa's `cls.predictions.*`
    as `lm_predictions.lm_head.*`), and the names the official code saves beside them (the RTD head
    `mask_predictions.*`, the generator's `lm_predictions.lm_head.*` and EMD positions, `deberta.embeddings.
    position_embeddings.weight`), which a plain load drops. A tensor of another shape than its place is one error
    line: such a file cannot be read into this recipe."""
    root, others = _places(declared, networks)
    placed = {}
    for name, value in state.items():
        candidates = (root + name, _joint_name(name, declared.prefix, declared.rename))
        key = next((k for k in candidates if k in params and not k.startswith(others)), None)
        if key is None:
            continue
        if tuple(params[key].shape) != tuple(value.shape):
            raise BertologyError(
                f"the released {declared.name}'s {name} has shape {tuple(value.shape)} and this recipe's "
                f"{key} {tuple(params[key].shape)}: the folder is not a {declared.name} of this recipe's shape"
            )
        placed[name] = key
    return placed


def check_readable(declared: Network, networks, params: Mapping, placed: set[str], unused: list[str]) -> None:
    """A released file whose names this version cannot read is refused, not loaded as random weights: an encoder
    weight it does not fill while it holds tensors with no place (a head it lacks is only initialised and named)."""
    root, others = _places(declared, networks)
    encoder = root + declared.plain_class.base_model_prefix + "."
    unfilled = [k for k in params if k.startswith(encoder) and not k.startswith(others) and k not in placed]
    unfilled = [k for k in unfilled if not k.endswith(".delta")]  # GDES's Δ: set from the tables
    if unfilled and unused:
        raise BertologyError(
            f"the released {declared.name}'s file does not fill {len(unfilled)} encoder weights (e.g. {unfilled[0]}) "
            f"and holds {len(unused)} this recipe has no place for (e.g. {unused[0]}): a layout this version "
            "cannot read"
        )


def load_parts(joint, networks: tuple[Network, ...], parts: Mapping[str, torch.nn.Module | Mapping]) -> list[str]:
    """Start the joint model (whose networks are `networks`) from released networks (by network name: a plain
    model, or the state dict of its released file, `read_weights`; a network not given keeps its initialisation),
    the inverse of `plain_part`: each plain weight goes where `plain_part` takes it from, and a released file's
    tensors that plain classes drop go where the official code holds them (`place_released`); those with no place
    (the discriminator file's unused MLM head) are named in one line, as the official `--init_discriminator` warns
    of them (microsoft/DeBERTa `apps/tasks/rtd_task.py:244-250`).
    A table the joint model shares between its networks (ELECTRA's embeddings, DeBERTa's ES) takes the first
    network's values (the discriminator's), as the official code holds one table; under GDES the generator keeps
    its table and Δ is set to the discriminator's minus it. Returns the joint model's weights that no part holds
    (they keep their initialisation: a head the release does not ship)."""
    params = joint.state_dict(keep_vars=True)
    first = networks[0].name
    values, owner, unused = {}, {}, []
    for declared in reversed(networks):  # the first (the discriminator) last
        if declared.name not in parts:
            continue
        part = parts[declared.name]
        state = part.state_dict() if isinstance(part, torch.nn.Module) else part
        placed = place_released(declared, networks, state, params)
        unused += [f"{declared.name} {name}" for name in state if name not in placed]
        check_readable(declared, networks, params, set(placed.values()), [n for n in state if n not in placed])
        root = _places(declared, networks)[0]
        direct = {name for name, key in placed.items() if key in (root + name, declared.prefix + name)}
        for name, key in sorted(placed.items(), key=lambda item: item[0] in direct):  # a tied copy yields to its own
            values[key], owner[key] = state[name], declared.name
    tied: dict[int, list[str]] = {}
    for key, param in params.items():
        tied.setdefault(id(param), []).append(key)
    differ = []
    for keys in tied.values():  # one tensor under several names: the first network's value for all of them
        given = [k for k in keys if k in values]
        chosen = next((k for k in given if owner[k] == first), given[0] if given else None)
        if chosen is None or len(keys) == 1:
            continue
        differ += [k for k in given if not torch.equal(values[k], values[chosen])]
        values.update(dict.fromkeys(keys, values[chosen]))
    if differ:
        logger.info(
            "the generator's %s differ from the discriminator's: the joint model shares the "
            "discriminator's, as the official code does",
            ", ".join(sorted(differ)[:3]),
        )
    if unused:
        logger.info("not used (no place in the joint model): %s", ", ".join(unused))
    with torch.no_grad():
        joint.load_state_dict(values, strict=False)
        for slot, table, delta in getattr(joint, "gdes_pairs", list)():
            delta.copy_(slot - table)  # E_G + Δ = E_D, within an fp32 rounding (docs/pretraining.md)
    initialised = {k for k in params if k not in values}
    initialised -= {f"{name}.delta" for name, m in joint.named_modules() if hasattr(m, "delta")}  # set just above
    return sorted(initialised)


def export_part(
    checkpoint: str | Path, output_dir: str | Path, part: str, kind: Kind | None = None, name: str | None = None
) -> Path:
    """Write network `part` of the joint model in `checkpoint` to `output_dir` as a plain folder, with its card.
    `kind`: what the checkpoint must hold (default: what its config.json names); `name`: what errors call it. A
    folder that is not such a checkpoint (a weight missing that no network `may_lack`) is one error line."""
    checkpoint, output_dir = Path(checkpoint), Path(output_dir)
    pretraining_class = _auto_map_class(checkpoint)
    kind = kind or kind_of(checkpoint)
    if kind is None or not kind.networks:
        raise BertologyError(
            f"{checkpoint} has no generator and discriminator: only ELECTRA, DeBERTa-v3 and replaced-token-detection "
            f"objectives on another encoder written by hf_bertology have two networks (its pretraining class: "
            f"{pretraining_class or 'none'})"
        )
    declared = network(kind.networks, part)  # an unknown part: one line before any loading
    name = name or kind.label
    try:
        joint, info = kind.model_class.from_pretrained(checkpoint, output_loading_info=True)
    except Exception as err:
        raise BertologyError(f"could not load a joint {name} model from {checkpoint} ({err})") from None
    optional = [n.prefix + key for n in kind.networks for key in n.may_lack]
    missing = set(info["missing_keys"]) - set(optional)
    if missing:
        raise BertologyError(
            f"{checkpoint} is not a joint {name} checkpoint written by hf_bertology (missing e.g. {sorted(missing)[0]})"
        )
    model = plain_part(joint, declared, kind.networks)
    logger.info("writing the %s %s (%s) to %s", name, part, type(model).__name__, output_dir)
    _write(model, checkpoint, output_dir)
    write_part_card(output_dir, part, recipe=checkpoint.name, variant=kind.label, corpus=f"see `{checkpoint}`")
    return output_dir


def joint_config(folder: str | Path):
    """The config of a joint run's `folder` read by our class (the family's `model_type` in memory), else None.
    `AutoTokenizer` needs a config: given none, it would build one for a `model_type` transformers does not know
    (asking about remote code, then warning of a type mismatch)."""
    kind = kind_of(folder)
    return kind.config_class.from_pretrained(folder) if kind is not None and kind.networks else None


def write_part_folders(
    model, networks: tuple[Network, ...], tokenizer, output_dir: str | Path, shown_in: str | Path | None = None, **card
) -> list[Path]:
    """The end of a joint run: a vanilla folder a network of `networks` (the model's, `Recipe.networks`:
    `output_dir/discriminator`, `output_dir/generator`, the layout of the papers' released checkpoints), each with its
    model card (`card`: `hub.write_part_card`'s fields; the cards name `shown_in/part` when the folder is written
    aside). A model with one network (`networks` empty) writes nothing. The joint folder itself stays as it is
    (resuming and export read it)."""
    folders = []
    for declared in networks:
        folder = Path(output_dir) / declared.name
        shutil.rmtree(folder, ignore_errors=True)  # ours: the parts of an earlier run into this folder
        part = plain_part(model, declared, networks)
        _write(part, Path(output_dir), folder, tokenizer)
        write_part_card(folder, declared.name, shown_as=Path(shown_in) / declared.name if shown_in else None, **card)
        folders.append(folder)
    return folders
