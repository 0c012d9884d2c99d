# hf_bertology — every target works on a fresh clone: it creates .venv, installs, then runs.
# torch is installed only when none is importable (users with a CUDA build keep theirs); CI pins the CPU wheel
# with TORCH_SPEC=torch==2.13.0.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# `make pretrain` with no variables: ELECTRA's objective at mini size on the embedded WikiText-2, offline, 600 steps
# of 0.96 s on 2 idle CPU cores (a fresh clone, 642 s in all), evaluated on held-out text before and after
# (the log's last lines: untrained -> trained).
# The papers' sizes and batches (electra-small: 128 a step) take seconds a step on a CPU: RECIPE=electra-small.
RECIPE ?= electra-mini
TRAIN_FILE ?=
OUTPUT_DIR ?= runs/$(RECIPE)
MAX_STEPS ?= 600
BATCH_SIZE ?= 32
PRETRAIN_ARGS ?=
MODEL ?= runs/$(RECIPE)
TASK ?= sst2
DATA_DIR ?= ../shared/data/glue/SST-2
GLUE_OUTPUT_DIR ?= runs/glue-$(TASK)
GLUE_ARGS ?=

.PHONY: install test test-slow test-gpu test-lowest test-newest mutants pretrain glue bench style quality clean

$(PY):
	$(PYTHON) -m venv --system-site-packages $(VENV)

$(STAMP): $(PY) pyproject.toml
	@$(PY) -c "import torch" 2>/dev/null && echo "torch already importable: $$($(PY) -c 'import torch; print(torch.__version__)')" \
		|| $(PY) -m pip install "$(TORCH_SPEC)"
	$(PY) -m pip install -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q tests

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow tests

test-gpu: $(STAMP)
	$(PY) -m pytest -q -m cuda tests

# The dependency range's two ends, each in a clean venv of its own (no system site-packages), on COMPAT_TESTS:
# `make test-lowest` installs pyproject.toml's lower bounds (.ci/lowest.txt as pip constraints; torch 2.5.0 is a
# CUDA wheel, ~3 GB with its nvidia libraries), `make test-newest` the newest releases pip picks (a fresh venv each
# time; NEWEST_TORCH_SPEC). Not in CI: ~13 min each from scratch on 2 cores (install ~7). docs/testing.md.
LOWEST_VENV ?= .venv-lowest
NEWEST_VENV ?= .venv-newest
NEWEST_TORCH_SPEC ?= torch
COMPAT_TESTS ?= tests/test_pretrain.py::test_pretrain_smoke tests/test_pretrain.py::test_resume_and_json_arguments \
	tests/test_training.py::test_every_family_accumulates_to_one_big_batch_through_the_trainer \
	tests/test_xlnet.py::test_pretrain_smoke_and_plain_loading tests/test_fixed_shape.py::test_pretrain_with_fixed_shape_batches \
	tests/test_modernbert_recipe.py::test_batch_warmup_through_pretrain_resumes_the_same_schedule tests/test_clients.py

$(LOWEST_VENV)/.installed: .ci/lowest.txt pyproject.toml
	rm -rf $(LOWEST_VENV)
	$(PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_VENV)/bin/python -m pip install -c .ci/lowest.txt torch
	$(LOWEST_VENV)/bin/python -m pip install -c .ci/lowest.txt -e ".[dev]"
	@touch $@

test-lowest: $(LOWEST_VENV)/.installed
	@$(LOWEST_VENV)/bin/python -m pip list 2>/dev/null | grep -i -E '^(torch|transformers|accelerate|datasets|tokenizers|huggingface.hub|safetensors) '
	$(LOWEST_VENV)/bin/python -m pytest -q $(COMPAT_TESTS)

test-newest:
	rm -rf $(NEWEST_VENV)
	$(PYTHON) -m venv $(NEWEST_VENV)
	$(NEWEST_VENV)/bin/python -m pip install "$(NEWEST_TORCH_SPEC)"
	$(NEWEST_VENV)/bin/python -m pip install -e ".[dev]"
	@$(NEWEST_VENV)/bin/python -m pip list 2>/dev/null | grep -i -E '^(torch|transformers|accelerate|datasets|tokenizers|huggingface.hub|safetensors) '
	$(NEWEST_VENV)/bin/python -m pytest -q $(COMPAT_TESTS)

# One-line mutations of the core (mutants/mutants.yaml), each run against the fast tests that must catch it;
# ~8 min on 2 idle cores, so outside `make test`. Writes mutants/last_result.md.
mutants: $(STAMP)
	$(PY) mutants/run.py

pretrain: $(STAMP)
	$(PY) -m hf_bertology pretrain --recipe $(RECIPE) --output_dir $(OUTPUT_DIR) --max_steps $(MAX_STEPS) \
		--per_device_train_batch_size $(BATCH_SIZE) \
		$(if $(TRAIN_FILE),--train_file $(TRAIN_FILE),) --do_eval --eval_on_start --max_eval_samples 512 --per_device_eval_batch_size 64 \
		--logging_steps 50 --save_steps 500 --save_total_limit 2 --resume_from_checkpoint last $(PRETRAIN_ARGS)

glue: $(STAMP)
	$(PY) -m hf_bertology glue --model_name_or_path $(MODEL) --task_name $(TASK) --data_dir $(DATA_DIR) \
		--output_dir $(GLUE_OUTPUT_DIR) $(GLUE_ARGS)

bench: $(STAMP)
	@for f in benchmarks/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

style: $(STAMP)
	$(PY) -m ruff format src tests examples benchmarks
	$(PY) -m ruff check --fix src tests examples benchmarks

quality: $(STAMP)
	$(PY) -m ruff format --check src tests examples benchmarks
	$(PY) -m ruff check src tests examples benchmarks

clean:
	rm -rf $(VENV) $(LOWEST_VENV) $(NEWEST_VENV) build dist .pytest_cache .ruff_cache src/*.egg-info
