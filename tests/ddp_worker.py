"""Multi-process half of tests/test_multiprocess.py; run under a launcher with 2 CPU processes (gloo):

    torchrun --nproc_per_node 2 tests/ddp_worker.py SPEC.json
    accelerate launch --multi_gpu --num_processes 2 tests/ddp_worker.py SPEC.json

SPEC: {"cases": [{"recipe", "tokenizer", "train_file", "output_dir"}, ...], "result": path, "wrap": "ddp"}.
For each variant family:
1. one optimizer step's loss and gradients through BertologyTrainer under DDP (each process holds half of a global
   batch; the Trainer's counting gathers the dict `num_items_in_batch` across processes) against one process on the
   whole batch, on every rank;
2. `bertology pretrain` (2 steps) under the same launch.
With "wrap": "fsdp2", step 1 runs on a model sharded by torch's FSDP2 (`fully_shard` on each transformer layer,
then on the whole model, over a CPU device mesh: what accelerate's TRANSFORMER_BASED_WRAP does on GPUs), and step 2
runs with `--fsdp full_shard`, which accelerate turns into DDP on CPUs: the run must warn that it does.
Rank 0 writes the largest differences to SPEC["result"].
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import sys

import torch
import torch.distributed as dist
from transformers import AutoTokenizer, TrainingArguments

import hf_bertology as hb
from hf_bertology import cli
from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
from hf_bertology.training.trainer import BertologyTrainer, is_count_key

GLOBAL_BATCH = 8


def shard_fsdp2(model: torch.nn.Module) -> torch.nn.Module:
    """FSDP2 over all processes: one group per transformer layer (the model's `_no_split_modules` blocks; the
    embeddings stay in the root group with the output head they are tied to), then the rest."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    blocks = {name for name in model._no_split_modules if name.endswith("Layer")}
    assert blocks, model._no_split_modules
    for module in list(model.modules()):
        if type(module).__name__ in blocks:
            fully_shard(module, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def full(tensor):
    """A gradient as one plain tensor (FSDP2 holds each process's shard of it as a DTensor)."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def one_step(case: dict, output_dir: str, wrap: str = "ddp") -> dict:
    # Dropout off: it draws per row, so half batches would see other masks than the whole batch.
    config = hb.get_recipe(case["recipe"]).config.to_dict()
    no_dropout = {k: 0.0 for k, v in config.items() if "dropout" in k and isinstance(v, float)}
    # RTD samples replacements at the recipe's temperature (1): each target's uniform is keyed by the collator's
    # per-token `sample_keys`, so a row samples alike in a half batch and in the whole one.
    recipe = hb.get_recipe(case["recipe"], **no_dropout)
    tokenizer = AutoTokenizer.from_pretrained(case["tokenizer"])
    recipe.adapt_to_tokenizer(tokenizer)
    examples = build_pretraining_dataset(
        tokenize_corpus(load_corpus(case["train_file"]), tokenizer),
        tokenizer,
        recipe.config,
        recipe.max_seq_length,
        seed=0,
    )
    features = [examples[i] for i in range(GLOBAL_BATCH)]
    batch = recipe.build_collator(tokenizer, seed=0)(features)  # same seed: the same global batch on every rank

    torch.manual_seed(0)
    reference = recipe.build_model()  # one process, the whole batch
    torch.manual_seed(0)
    model = recipe.build_model()

    args = TrainingArguments(output_dir, use_cpu=True, report_to="none", ddp_backend="gloo", seed=0)
    trainer = BertologyTrainer(model=model, args=args, data_collator=lambda x: x)
    world, rank = args.world_size, args.process_index
    assert world == 2 and dist.is_initialized(), (world, dist.is_initialized())

    # -- single process: counts of the whole batch, losses normalised by them, backward ---------------------
    counts = {k: v.ne(-100).sum() for k, v in batch.items() if is_count_key(k)}
    counts["attention_mask"] = batch["attention_mask"].sum()
    reference.train()
    ref_loss = reference(**batch, num_items_in_batch=counts).loss
    ref_loss.backward()

    # -- DDP: half the rows on each process, through the Trainer ---------------------------------------------
    share = GLOBAL_BATCH // world
    local = {k: v[rank * share : (rank + 1) * share] if v.dim() > 0 else v for k, v in batch.items()}
    if wrap == "fsdp2":
        wrapped = shard_fsdp2(trainer.model)
        assert any(hasattr(p, "full_tensor") for p in wrapped.parameters())  # really sharded
    else:
        wrapped = trainer.accelerator.prepare(trainer.model)
    trainer.model_wrapped = wrapped
    local_counts = trainer._get_num_items_in_batch([local], args.device)
    local_loss = trainer.training_step(wrapped, local, local_counts)
    losses = [torch.zeros(()) for _ in range(world)]
    dist.all_gather(losses, local_loss.detach().float())

    count_diff = max(abs(int(local_counts[k]) - int(counts[k])) for k in counts)
    ref_grads = dict(reference.named_parameters())
    grad_diff = max(
        (full(p.grad) - ref_grads[n].grad).abs().max().item()
        for n, p in trainer.model.named_parameters()
        if p.grad is not None or ref_grads[n].grad is not None
    )
    missing = [n for n, p in trainer.model.named_parameters() if (p.grad is None) != (ref_grads[n].grad is None)]
    return {
        "recipe": case["recipe"],
        "sampling_temperature": getattr(recipe.config, "sampling_temperature", None),
        "count_diff": count_diff,
        # The Trainer scales each process's loss by the number of processes (counts are global): their mean is
        # the loss of the whole batch.
        "loss_diff": abs(torch.stack(losses).mean().item() - ref_loss.item()),
        "loss": ref_loss.item(),
        "grad_diff": grad_diff,
        "missing_grads": missing,
    }


def main() -> None:
    faulthandler.dump_traceback_later(600, exit=True)  # a stuck collective prints its stacks and exits
    spec = json.loads(open(sys.argv[1]).read())
    results = []
    wrap = spec.get("wrap", "ddp")
    for case in spec["cases"]:
        results.append(one_step(case, case["output_dir"] + "-step", wrap))
        argv = [
            "pretrain", "--recipe", case["recipe"], "--tokenizer_name", case["tokenizer"],
            "--train_file", case["train_file"], "--output_dir", case["output_dir"], "--max_steps", "2",
            "--per_device_train_batch_size", "2", "--save_strategy", "no",
            "--report_to", "none", "--use_cpu", "true", "--ddp_backend", "gloo", "--seed", "0",
        ]  # fmt: skip
        if wrap == "fsdp2":  # accelerate does not shard on CPUs: the run must say so, then train with DDP
            with contextlib.redirect_stderr(io.StringIO()) as err:
                results[-1]["pretrain_status"] = cli.main([*argv, "--fsdp", "full_shard"])
            results[-1]["fsdp_ignored_warned"] = "FSDP was asked for" in err.getvalue()
            results[-1]["stderr"] = err.getvalue()[-2000:] if results[-1]["pretrain_status"] else ""
        else:
            results[-1]["pretrain_status"] = cli.main(argv)
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, results)
    if dist.get_rank() == 0:
        with open(spec["result"], "w") as handle:
            json.dump(gathered, handle)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
