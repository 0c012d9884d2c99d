# hf_bertology — every target works on a fresh clone: it creates .venv, installs, then runs.
# torch is installed only when none is importable (users with a CUDA build keep theirs); CI pins the CPU wheel
# with TORCH_SPEC=torch==2.13.0.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# `make pretrain` with no variables: ELECTRA's objective at mini size on the embedded WikiText-2, offline, 600 steps
# of 1.65 s on 2 CPU cores (measured), evaluated on held-out text before and after (the log's last lines: untrained -> trained).
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

.PHONY: install test test-slow test-gpu mutants pretrain glue bench style quality clean

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
	rm -rf $(VENV) build dist .pytest_cache .ruff_cache src/*.egg-info
