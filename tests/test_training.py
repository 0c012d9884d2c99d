"""BertologyTrainer: gradient accumulation gives the gradients of one big batch; component losses are logged."""

from __future__ import annotations

import pytest
import torch
from transformers import TrainerCallback, TrainingArguments

import hf_bertology as hb
from hf_bertology.collators import pad_features
from hf_bertology.training.trainer import BertologyTrainer

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37}
TINY_NO_DROPOUT = {**TINY, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def fixed_features(n: int, length: int = 20, vocab: int = 80, seed: int = 0) -> list[dict]:
    """Pre-masked examples with *different* numbers of masked tokens, so a mean of means would be wrong."""
    g = torch.Generator().manual_seed(seed)
    features = []
    for i in range(n):
        ids = torch.randint(5, vocab, (length,), generator=g)
        labels = torch.full((length,), -100)
        chosen = torch.randperm(length, generator=g)[: 1 + 3 * i]
        labels[chosen] = ids[chosen]
        features.append(
            {
                "input_ids": ids.tolist(),
                "token_type_ids": [0] * (length // 2) + [1] * (length - length // 2),
                "labels": labels.tolist(),
                "next_sentence_label": i % 2,
            }
        )
    return features


class GradientCatcher(TrainerCallback):
    def __init__(self):
        self.gradients = None

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.gradients = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def one_step(tmp_path, state_dict, features, batch_size: int, accumulation: int):
    model = hb.BertologyBertForPreTraining(hb.BertologyBertConfig(vocab_size=80, **TINY_NO_DROPOUT))
    model.load_state_dict(state_dict)
    catcher = GradientCatcher()
    args = TrainingArguments(
        output_dir=str(tmp_path / f"run{batch_size}"),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation,
        max_steps=1,
        learning_rate=1e-3,
        max_grad_norm=0.0,
        logging_steps=1,
        save_strategy="no",
        remove_unused_columns=False,
        report_to=[],
        seed=0,
        disable_tqdm=True,
    )
    trainer = BertologyTrainer(
        model=model,
        args=args,
        train_dataset=features,
        data_collator=lambda batch: pad_features(batch, pad_token_id=0),
        callbacks=[catcher],
    )
    trainer.train()
    logs = next(log for log in trainer.state.log_history if "loss" in log)
    return catcher.gradients, logs


def test_accumulated_batches_equal_one_big_batch(tmp_path):
    torch.manual_seed(0)
    state = hb.BertologyBertForPreTraining(hb.BertologyBertConfig(vocab_size=80, **TINY)).state_dict()
    features = fixed_features(8)
    big_grads, big_logs = one_step(tmp_path, state, features, batch_size=8, accumulation=1)
    acc_grads, acc_logs = one_step(tmp_path, state, features, batch_size=4, accumulation=2)
    assert big_logs["loss"] == pytest.approx(acc_logs["loss"], abs=1e-4)
    assert big_logs["mlm_loss"] == pytest.approx(acc_logs["mlm_loss"], abs=1e-4)
    assert big_logs["nsp_loss"] == pytest.approx(acc_logs["nsp_loss"], abs=1e-4)
    assert big_logs["mlm_loss"] + big_logs["nsp_loss"] == pytest.approx(big_logs["loss"], abs=1e-3)
    assert set(big_grads) == set(acc_grads)
    for name in big_grads:
        torch.testing.assert_close(acc_grads[name], big_grads[name], atol=1e-5, rtol=1e-4, msg=name)
    # ... and both equal a plain forward on all 8 examples at once (mean MLM + mean NSP), the large-batch loss.
    model = hb.BertologyBertForPreTraining(hb.BertologyBertConfig(vocab_size=80, **TINY_NO_DROPOUT))
    model.load_state_dict(state)
    out = model(**pad_features(features, pad_token_id=0))
    assert out.loss.item() == pytest.approx(big_logs["loss"], abs=1e-4)
    out.loss.backward()
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(acc_grads[name], parameter.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_counts_per_objective(tmp_path):
    features = fixed_features(4)
    model = hb.BertologyBertForPreTraining(hb.BertologyBertConfig(vocab_size=80, **TINY))
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], remove_unused_columns=False)
    trainer = BertologyTrainer(model=model, args=args, data_collator=lambda b: pad_features(b, 0))
    batches = [pad_features(features[:2], 0), pad_features(features[2:], 0)]
    counts = trainer._get_num_items_in_batch(batches, torch.device("cpu"))
    assert int(counts["labels"]) == sum(1 + 3 * i for i in range(4))
    assert int(counts["next_sentence_label"]) == 4
    assert int(counts["attention_mask"]) == 4 * 20


def test_component_losses_are_logged_in_evaluation(tmp_path):
    """README "Logs": the component losses and accuracies also come out of evaluation as `eval_*`, with the values
    of a plain forward on the same batch."""
    torch.manual_seed(0)
    features = fixed_features(4)
    model = hb.BertologyBertForPreTraining(hb.BertologyBertConfig(vocab_size=80, **TINY))
    args = TrainingArguments(
        output_dir=str(tmp_path), report_to=[], remove_unused_columns=False, per_device_eval_batch_size=4
    )
    trainer = BertologyTrainer(
        model=model, args=args, eval_dataset=features, data_collator=lambda b: pad_features(b, 0)
    )
    metrics = trainer.evaluate()
    with torch.no_grad():
        out = model.eval()(**pad_features(features, 0))
    for name in ("mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy"):
        assert metrics[f"eval_{name}"] == pytest.approx(getattr(out, name).item(), abs=1e-4), name
    assert metrics["eval_loss"] == pytest.approx(metrics["eval_mlm_loss"] + metrics["eval_nsp_loss"], abs=1e-3)


def test_a_second_train_call_logs_only_its_own_steps(tmp_path):
    """`train()` twice on one trainer: the first call's values after its last log (step 3 of 3, logging every 2)
    must not leak into the second call's first log, whose component losses add up to its own loss."""
    torch.manual_seed(0)
    model = hb.BertologyBertForPreTraining(hb.BertologyBertConfig(vocab_size=80, **TINY_NO_DROPOUT))
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, max_steps=3, logging_steps=2, learning_rate=1e-3,
        save_strategy="no", remove_unused_columns=False, report_to=[], seed=0, disable_tqdm=True,
    )  # fmt: skip
    trainer = BertologyTrainer(
        model=model, args=args, train_dataset=fixed_features(8), data_collator=lambda b: pad_features(b, 0)
    )
    trainer.train()
    trainer.train()
    logs = [log for log in trainer.state.log_history if "mlm_loss" in log]
    assert len(logs) == 1  # the second call's step 2 (log_history restarts with the new state)
    assert logs[0]["mlm_loss"] + logs[0]["nsp_loss"] == pytest.approx(logs[0]["loss"], abs=1e-3)


@pytest.mark.parametrize(
    "recipe_name",
    [
        "bert-tiny",
        "roberta-tiny",
        "spanbert-tiny",
        "albert-tiny",
        "electra-tiny",
        "deberta-v3-tiny",
        "modernbert-tiny",
    ],
)
def test_every_family_accumulates_to_one_big_batch_through_the_trainer(recipe_name, tmp_path, corpus_file):
    """8 examples as one batch, or as 2 accumulated batches of 4, through `BertologyTrainer` with the family's own
    collator (masks keyed by example; RTD's sampling noise keyed by token, at temperature 1): the same logged
    losses and the same gradients. Batches of 4 are padded to their own longest row, so padding differs too."""
    from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
    from platform_support import no_dropout

    recipe = hb.get_recipe(recipe_name, **no_dropout(recipe_name))
    corpus = load_corpus(train_files=[str(corpus_file)])
    tokenizer = recipe.train_tokenizer(corpus["text"], 300)
    recipe.adapt_to_tokenizer(tokenizer)
    recipe.fit_to_length(48)
    examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, 48, 0)
    examples = examples.select(range(8))
    torch.manual_seed(0)
    state = recipe.build_model().state_dict()
    results = []
    for batch_size, accumulation in ((8, 1), (4, 2)):
        model = recipe.build_model()
        model.load_state_dict(state)
        catcher = GradientCatcher()
        args = TrainingArguments(
            output_dir=str(tmp_path / f"run{batch_size}"),
            per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=accumulation,
            max_steps=1,
            max_grad_norm=0.0,
            logging_steps=1,
            save_strategy="no",
            remove_unused_columns=False,
            report_to=[],
            seed=0,
            disable_tqdm=True,
            use_cpu=True,
        )
        collator = recipe.build_collator(tokenizer, seed=3)
        trainer = BertologyTrainer(
            model=model, args=args, train_dataset=examples, data_collator=collator, callbacks=[catcher]
        )
        trainer.train()
        results.append((catcher.gradients, next(log for log in trainer.state.log_history if "loss" in log)))
    (big_grads, big_logs), (acc_grads, acc_logs) = results
    for key in [k for k in big_logs if k.endswith("loss")]:
        assert acc_logs[key] == pytest.approx(big_logs[key], rel=1e-3, abs=1e-4), key
    assert big_grads.keys() == acc_grads.keys()
    for name, grad in big_grads.items():
        torch.testing.assert_close(acc_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)
