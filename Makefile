# Self-documenting: `make help` lists every target with its `## ` comment.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export PIP_CONSTRAINT := $(CURDIR)/constraints.txt
PYTEST_FAST := -m "not slow and not dist and not gpu and not bench"

.DEFAULT_GOAL := help
.PHONY: upstream-suite help docs docs-serve install install-latest lock test-compat install-emulators install-browser test test-all test-dist test-browser test-gpu gpu-check gpu-wheels lint format config-index bench clean train train-ddp launch bench-trainer eval-harness eval generate finetune

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' \
	  '{name[NR] = $$1; text[NR] = $$2; if (length($$1) > w) w = length($$1)} \
	  END {fmt = "  %-" w "s  %s\n"; for (i = 1; i <= NR; i++) printf fmt, name[i], text[i]}'

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install --upgrade pip wheel setuptools

# The environment, made on first use: `make train` / `make test` (and every target that runs the project) on a fresh
# clone install it first; an existing environment that imports the project is only marked as ready.
ENV_READY := $(VENV)/.installed
$(ENV_READY):
	@if command -v $(PY) >/dev/null && $(PY) -c "import foundry, streaming, torch" 2>/dev/null; then \
	  mkdir -p $(VENV) && touch $@; \
	else echo "[make] no working $(VENV): running make install first"; $(MAKE) --no-print-directory install; fi

LOCK := requirements/dev.lock
# Where torch comes from: empty = pip's own sources (PyPI: the CUDA build on Linux; on this project's CPU machines the
# local CPU wheel); TORCH_INDEX=https://download.pytorch.org/whl/cpu for the CPU build anywhere (docs/getting-started.md: Install)
TORCH_INDEX ?=
TORCH_INSTALL = $(PY) -m pip install "torch==2.13.0" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))

install: $(PY) ## create .venv: torch==2.13.0 first, then the locked versions of every dependency (requirements/dev.lock), then the project
	$(TORCH_INSTALL)
	$(PY) -m pip install -r $(LOCK)
	$(PY) -m pip install --no-deps -e .
	@$(MAKE) --no-print-directory install-emulators
	@touch $(ENV_READY)

install-latest: $(PY) ## like install, but the newest releases pyproject.toml allows instead of the lock (what `pip install foundry-stack` gets today)
	$(TORCH_INSTALL)
	$(PY) -m pip install --upgrade --upgrade-strategy eager -e ".[dev]"
	@$(MAKE) --no-print-directory install-emulators

lock: $(PY) ## refresh requirements/dev.lock: the newest versions pyproject.toml allows, pinned (pip-tools; commit the result, then make install)
	$(PY) -m pip install -q "pip-tools>=7.4,<8"
	CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/bin/pip-compile --quiet --upgrade --extra dev --strip-extras \
	  --no-emit-find-links --no-emit-index-url --no-emit-trusted-host \
	  --unsafe-package torch --unsafe-package foundry-stack --output-file $(LOCK) pyproject.toml

test-compat: $(PY) ## model/generation/export/eval-adapter tests on the lowest and the newest allowed dependencies and the GPU image's (venvs in /tmp/foundry-compat)
	$(PY) scripts/test_compat.py $(ARGS)

upstream-suite: $(ENV_READY) ## mosaicml-streaming 0.13.0's own tests against ours (fetches its source package and pytest 8 from PyPI into .cache/); ARGS="--python /tmp/ref/venv-streaming/bin/python" runs them against upstream
	$(PY) scripts/upstream_streaming_suite.py $(ARGS)

AZURITE ?= 3.35.0
install-emulators: ## Azurite (Azure Blob emulator, npm) into .cache/node for the Azure tests; skipped (tests skip) without node >= 18
	@if ! command -v npm >/dev/null 2>&1; then echo "npm not found: skipping the Azure emulator (its tests will be skipped)"; \
	elif [ "$$(node -p 'process.versions.node.split(".")[0]')" -lt 18 ]; then \
	  echo "node $$(node --version) is older than 18: skipping the Azure emulator (its tests will be skipped)"; \
	else mkdir -p .cache/node && cd .cache/node && ( [ -f package.json ] || npm init -y >/dev/null ) && \
	  npm install --no-audit --no-fund --loglevel=error azurite@$(AZURITE); fi

# torchao for the FP8 tests only, outside the venv: transformers imports torchao at start-up whenever it is installed.
FP8_SITE := .cache/fp8
$(FP8_SITE)/.installed: | $(ENV_READY)
	$(PY) -m pip install -q --no-deps --upgrade --target $(FP8_SITE) "torchao==$(TORCHAO)"
	@touch $@

test: $(ENV_READY) $(FP8_SITE)/.installed ## the fast default tier (CPU, no multi-process, no slow)
	$(PY) -m pytest $(PYTEST_FAST) -q

test-all: $(ENV_READY) $(FP8_SITE)/.installed ## every test that can run on this machine (slow and multi-process included)
	$(PY) -m pytest -m "not gpu" -q

test-dist: $(ENV_READY) ## multi-process gloo tests only
	$(PY) -m pytest -m dist -q

test-browser: $(ENV_READY) ## the HTML report rendered in headless Chromium (needs /usr/bin/chromium: make install-browser)
	$(PY) -m pytest -m browser -q

install-browser: ## Debian's chromium for the browser tests (root, apt)
	apt-get install -y --no-install-recommends chromium

test-gpu: $(ENV_READY) ## GPU tests (device machine only; none selected is not a failure)
	$(PY) -m pytest -m gpu -q || [ $$? -eq 5 ]

# The GPU machine (issue 30): its own python3 with torch/CUDA/triton/transformers and no network. `make gpu-wheels`, run
# beforehand where PyPI is reachable, downloads what that image lacks into .gpu-wheels (ignored, < 64 MiB, carried to
# the GPU machine); `make gpu-check` there installs them into .gpu-site and runs scripts/bench/gpu_check.py.
GPU_PY ?= python3
GPU_WHEELS := .gpu-wheels
GPU_SITE := .gpu-site
TORCHAO ?= 0.18.0
LIGER ?= 0.8.5
# the versions CI tests (requirements/dev.lock), plus the two GPU-only packages
GPU_LOCKED = $(shell grep -iE '^(hydra-core|omegaconf|zstandard|smart-open)==' $(LOCK))
GPU_PKGS = $(GPU_LOCKED) torchao==$(TORCHAO) liger-kernel==$(LIGER)
GPU_PLATFORMS := --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
gpu-wheels: $(PY) ## where PyPI is reachable: wheels of what the GPU machine lacks (hydra, omegaconf, zstandard, torchao, liger-kernel) into .gpu-wheels
	rm -rf $(GPU_WHEELS) && mkdir -p $(GPU_WHEELS)
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $(GPU_PLATFORMS) \
	  -d $(GPU_WHEELS) $(GPU_PKGS)
	$(PY) -m pip wheel -q --no-deps -w $(GPU_WHEELS) $(shell grep -i '^antlr4-python3-runtime==' $(LOCK))  # sdist only on PyPI; pure Python
	@mb=$$(du -sm $(GPU_WHEELS) | cut -f1); ls $(GPU_WHEELS); echo "$(GPU_WHEELS): $$mb MiB"; \
	  if [ $$mb -gt 60 ]; then echo "error: $(GPU_WHEELS) is $$mb MiB; the GPU machine takes at most 64 MiB"; exit 1; fi

# A failed install is one JSON line and the checks still run (each then reports what it lacks); exit 1 if either failed.
gpu-check: ## on a GPU machine (no .venv needed): GPU tests, the speed matrix, trainer overhead, FSDP2 runs; JSON lines, < 10 min on one H100
	@st=0; rm -rf $(GPU_SITE); if [ -d $(GPU_WHEELS) ]; then \
	  $(GPU_PY) -m pip install -q --no-index --no-deps --no-compile --target $(GPU_SITE) $(GPU_WHEELS)/*.whl \
	  || { echo '{"check": "gpu-wheels", "ok": false, "error": "pip install of $(GPU_WHEELS) into $(GPU_SITE) failed (above)"}'; st=1; }; \
	else echo "[make gpu-check] no $(GPU_WHEELS) (make gpu-wheels): using what $(GPU_PY) has"; fi; \
	echo "PYTHONPATH=$(CURDIR)/src:$(CURDIR):$(CURDIR)/$(GPU_SITE) $(GPU_PY) scripts/bench/gpu_check.py $(ARGS)"; \
	PYTHONPATH=$(CURDIR)/src:$(CURDIR):$(CURDIR)/$(GPU_SITE)$${PYTHONPATH:+:$$PYTHONPATH} PYTHONUNBUFFERED=1 \
	  $(GPU_PY) scripts/bench/gpu_check.py $(ARGS) || st=1; exit $$st

lint: $(ENV_READY) ## ruff check, format check and mypy type check of src/ (config: [tool.mypy] in pyproject.toml)
	$(PY) -m ruff check src tests scripts
	$(PY) -m ruff format --check src tests scripts
	$(PY) -m mypy

format: $(ENV_READY) ## apply ruff fixes and formatting
	$(PY) -m ruff check --fix src tests scripts
	$(PY) -m ruff format src tests scripts

BENCHES ?= config_error streaming_read epoch_plan streaming_remote model_step trainer_overhead fused_loss icl_eval mixture_train finetune_throughput failure_recovery chaos

config-index: $(ENV_READY) ## rewrite conf/_keys.json (every config key and its type, for train.py's early checks) from the schemas
	$(PY) -c "from foundry.config_index import write_index; write_index('conf')"

bench: $(ENV_READY) ## run every benchmark (BENCHES="..." to pick); each prints JSON lines with the machine
	@for b in $(BENCHES); do \
	  if [ -f scripts/bench/$$b.py ]; then echo "== $$b" >&2; $(PY) scripts/bench/$$b.py || exit 1; fi; \
	done

clean: ## remove run outputs and caches
	rm -rf outputs multirun site .pytest_cache .ruff_cache .mypy_cache .hypothesis

# The documentation site (mkdocs.yml, docs/): the reference pages are generated from the typed schemas and the tools'
# parsers, the benchmark plots from scripts/bench/results/ (scripts/docs/); a broken link or anchor fails the build.
DOCS_ENV := NO_MKDOCS_2_WARNING=1
docs: $(ENV_READY) ## the documentation site: regenerate docs/reference/ and the plots, then mkdocs build --strict into site/
	$(PY) scripts/docs/gen_config_reference.py
	$(PY) scripts/docs/gen_cli_reference.py
	$(PY) scripts/docs/gen_bench_plots.py
	$(DOCS_ENV) $(VENV)/bin/mkdocs build --strict --quiet

docs-serve: $(ENV_READY) ## preview the documentation site at http://127.0.0.1:8000 (live reload; make docs first to regenerate)
	$(DOCS_ENV) $(VENV)/bin/mkdocs serve

train: $(ENV_READY) ## offline quick start (mpt-tiny, ~1 min on CPU) as run `quickstart` (again: it autoresumes); ARGS="trainer.max_duration=1200ba"
	$(PY) train.py run_name=quickstart $(ARGS)

# Finetuning (task=finetune). Without CKPT: the quick-start checkpoint when `make train` left one, else a fresh mpt-tiny
# (from_scratch=true: task=finetune refuses random weights unless asked).
finetune: $(ENV_READY) ## CPU finetuning recipe (offline instruction set, packed): make finetune [CKPT=<checkpoint>] [ARGS="trainer.max_duration=1ep"]
	@ckpt="$(CKPT)"; \
	if [ -z "$$ckpt" ] && [ -d outputs/quickstart/checkpoints ]; then ckpt=outputs/quickstart/checkpoints; fi; \
	scratch=; if [ -z "$$ckpt" ]; then scratch=from_scratch=true; echo "[make finetune] no CKPT and no outputs/quickstart/checkpoints (make train): finetuning a fresh mpt-tiny (from_scratch=true)"; fi; \
	set -x; $(PY) train.py experiment=finetune-cpu run_name=finetune-cpu $${ckpt:+checkpoint.load_path=$$ckpt} $$scratch $(ARGS)

NPROC ?= 2
PARALLELISM ?= ddp
train-ddp: $(ENV_READY) ## the quick start on NPROC=2 CPU processes under torchrun (PARALLELISM=ddp|fsdp|fsdp-grad-op|hsdp)
	OMP_NUM_THREADS=1 $(PY) -m torch.distributed.run --standalone --nproc_per_node=$(NPROC) train.py \
	  parallelism=$(PARALLELISM) run_name=quickstart-ddp $(ARGS)

launch: $(ENV_READY) ## supervised run: torchrun restarts, health checks, hang watchdog, events.jsonl (NPROC=2 CPU ranks; ARGS=overrides)
	OMP_NUM_THREADS=1 $(PY) -m foundry.launch $(LAUNCH_ARGS) --standalone --nproc-per-node=$(NPROC) -- train.py \
	  parallelism=$(PARALLELISM) run_name=quickstart-launch $(ARGS)

.PHONY: runs
runs: $(ENV_READY) ## run directories: make runs [ARGS="list" | "show RUN" | "logs RUN -f" | "stop RUN" | "resume RUN" | "report RUN|SWEEP"] (--root s3://...)
	$(PY) -m foundry.runs $(or $(ARGS),list)

bench-trainer: $(ENV_READY) ## trainer vs bare PyTorch loop tokens/s (CPU; --gpu for mpt-125m/1b MFU) and converter tokens/s
	$(PY) scripts/bench/trainer_overhead.py

# ICL evaluation (foundry.eval). Without CKPT: the newest quick-start checkpoint if there is one, else random init.
# Each suite has its own run folder (outputs/eval-<EVAL>, or RUN_NAME), so one suite's results never replace another's.
EVAL ?= offline
eval: $(ENV_READY) ## ICL tasks on a model: make eval [CKPT=<checkpoint>] [MODEL=mpt-tiny] [EVAL=offline|light|gauntlet-v0.3] [ARGS=...] -> outputs/eval-<EVAL>
	@ckpt="$(CKPT)"; \
	if [ -z "$$ckpt" ] && [ -d outputs/quickstart/checkpoints ]; then ckpt=outputs/quickstart/checkpoints; fi; \
	if [ -z "$$ckpt" ]; then echo "[make eval] no CKPT and no outputs/quickstart/checkpoints: evaluating a randomly initialised model"; fi; \
	set -x; EVAL_DATA="$${EVAL_DATA:-$(CURDIR)/../shared/data/icl}" $(PY) train.py task=eval model=$(or $(MODEL),mpt-tiny) \
	  eval=$(EVAL) run_name=$(or $(RUN_NAME),eval-$(EVAL)) $${ckpt:+checkpoint.load_path=$$ckpt} $(ARGS)

# lm-evaluation-harness on our model (offline; local task yamls in evals/harness_tasks, data under EVAL_DATA).
TASKS ?= piqa_local,lambada_local
HARNESS_ARGS ?= --device cpu --batch_size 16
eval-harness: $(ENV_READY) ## lm-eval tasks on a model: make eval-harness CKPT=<HF export or checkpoint> TASKS=piqa_local [TOKENIZER=... LIMIT=...]
	@if [ -z "$(CKPT)" ]; then echo "set CKPT=<HF export folder or foundry checkpoint> (see docs/guides/evaluation.md: lm-evaluation-harness)"; exit 2; fi
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 EVAL_DATA="$${EVAL_DATA:-$(CURDIR)/../shared/data/icl}" \
	$(PY) -m foundry.eval.harness run --model foundry \
	  --model_args "checkpoint=$(CKPT)$(if $(TOKENIZER),$(comma)tokenizer=$(TOKENIZER))$(if $(CONFIG),$(comma)config=$(CONFIG))" \
	  --tasks $(TASKS) --include_path evals/harness_tasks $(HARNESS_ARGS) $(if $(LIMIT),--limit $(LIMIT)) \
	  --output_path $(or $(OUT),outputs/eval-harness)
comma := ,

# Generation (foundry.generate). Without CKPT: the newest quick-start checkpoint.
generate: $(ENV_READY) ## completions from a model: make generate [CKPT=<checkpoint or HF folder>] [ADAPTER=<LoRA folder>] PROMPT="..." [ARGS="--temperature 0.7 --stop ###"]
	@ckpt="$(or $(CKPT),outputs/quickstart/checkpoints)"; \
	set -x; $(PY) scripts/generate.py --model "$$ckpt" $(if $(ADAPTER),--adapter "$(ADAPTER)") \
	  --prompt "$(or $(PROMPT),The history of)" $(ARGS)
