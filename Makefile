# Two environments, one per supported Paddle x NLP-stack pair (docs/environments.md); `make demo` and `make test`
# work on a fresh machine:
#   .venv    the newest Paddle 3.x CPU wheel + PaddleFormers 1.2 (the Paddle 3 stack) + what the kits import
#   .venv26  Paddle 2.6.2 (what PyPI's only GPU wheel is) + PaddleNLP 2.8.1 with its pins
# Each is reinstalled when pyproject.toml or this file changes (the stamp's name is their checksum).
PYTHON ?= python3
PADDLE3 := 3.3.1
PADDLE26 := 2.6.2
VENV := .venv
BIN := $(VENV)/bin
VENV26 := .venv26
BIN26 := $(VENV26)/bin
CHECKSUM := $(shell cat pyproject.toml Makefile | cksum | cut -d' ' -f1)
STAMP := $(VENV)/.installed-$(CHECKSUM)
STAMP26 := $(VENV26)/.installed-$(CHECKSUM)

.PHONY: install install26 demo test test-paddle3 test-fast test-paddle26 test-noise test-load lint bench clean

# PaddleNLP belongs to .venv26 only: a .venv made before 0.4 had it, and its pins break PaddleFormers'.
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip uninstall --quiet --yes paddlenlp
	$(BIN)/python -m pip install --quiet 'paddlepaddle==$(PADDLE3)' -e '.[cpu,formers,kits,dev]'
	rm -f $(VENV)/.installed-*
	touch $@

$(STAMP26): pyproject.toml Makefile
	test -x $(BIN26)/python || $(PYTHON) -m venv $(VENV26)
	$(BIN26)/python -m pip install --quiet --upgrade pip
	$(BIN26)/python -m pip install --quiet 'paddlepaddle==$(PADDLE26)' 'protobuf<7' -e '.[cpu,nlp,dev]'
	rm -f $(VENV26)/.installed-*
	touch $@

install: $(STAMP)

install26: $(STAMP26)

# The demo: a PaddleFormers SFT + LoRA config as PaddleFormers' examples shape it, on a tiny local Llama (Paddle 3 stack).
demo: install
	$(BIN)/vramtune probe configs/formers-sft-lora-cpu.yaml --budget 4MiB

# The whole suite on Paddle 3.x (PaddleNLP's tests skip there) and the Paddle tests on Paddle 2.6.2 with
# PaddleNLP 2.8.1 (PaddleFormers' tests skip there) side by side, each over two pytest workers (pytest-xdist; every
# test has its own cache and device locks), each environment's tests starting as soon as it is installed: one
# suite's idle moments (installing, a process starting, a probe's timeout) are the other's. Each suite's output is
# shown when it ends; make test fails when either fails.
WORKERS ?= 2
test:
	@echo "make test: $(VENV)'s whole suite and $(VENV26)'s Paddle tests side by side; each one's output when it ends"
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-paddle3 test-paddle26

test-paddle3: install
	$(BIN)/python -m pytest -q -n $(WORKERS)

test-fast: install
	$(BIN)/python -m pytest -q -n $(WORKERS) -m 'not paddle'

test-paddle26: install26
	$(BIN26)/python -m pytest -q -n $(WORKERS) -m paddle

# The Paddle tests with every measured throughput multiplied by a random factor in [1 - NOISE, 1 + NOISE]
# (tests/noise/sitecustomize.py): a test whose outcome depends on which configuration CPU timing picks fails here.
NOISE ?= 0.5
test-noise: install install26
	VRAMTUNE_TEST_NOISE=$(NOISE) PYTHONPATH=tests/noise $(BIN)/python -m pytest -q -n $(WORKERS) -m paddle
	VRAMTUNE_TEST_NOISE=$(NOISE) PYTHONPATH=tests/noise $(BIN26)/python -m pytest -q -n $(WORKERS) -m paddle

# The Paddle tests beside HOGS CPU hogs (busy loops tests/load/with-hogs starts, and ends by the pids it recorded), as
# on a busy machine: no test may depend on how fast the machine is (a process's start, import or training time).
HOGS ?= 2
test-load: install install26
	tests/load/with-hogs $(HOGS) $(BIN)/python -m pytest -q -n $(WORKERS) -m paddle
	tests/load/with-hogs $(HOGS) $(BIN26)/python -m pytest -q -n $(WORKERS) -m paddle

lint: install
	$(BIN)/ruff check vramtune tests bench examples
	$(BIN)/lint-imports

# bench/run.py's first spec is bert-mini (PaddleNLP): it runs in .venv26.
bench: install install26
	$(BIN)/python bench/soak.py
	$(BIN26)/python bench/run.py

clean:
	rm -rf $(VENV) $(VENV26) .vramtune .pytest_cache
