# Everything installs into .venv (newest Paddle 3.x) and .venv26 (Paddle 2.6.2, what PyPI's only GPU wheel is);
# `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
VENV26 := .venv26
STAMP26 := $(VENV26)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install demo test test-fast test-paddle26 lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[cpu,nlp,dev]'
	rm -f $(VENV)/.installed-*
	touch $@

$(STAMP26): pyproject.toml
	test -x $(VENV26)/bin/python || $(PYTHON) -m venv $(VENV26)
	$(VENV26)/bin/python -m pip install --quiet --upgrade pip
	$(VENV26)/bin/python -m pip install --quiet 'paddlepaddle==2.6.2' 'protobuf<7' -e '.[dev]'
	rm -f $(VENV26)/.installed-*
	touch $@

install: $(STAMP)

demo: install
	$(BIN)/vramtune probe configs/bert-mini-cpu.yaml

# The whole suite on Paddle 3.x, then the Paddle tests again on Paddle 2.6.2 (those needing PaddleNLP skip there),
# each over two pytest workers (pytest-xdist; every test has its own cache and device locks).
WORKERS ?= 2
test: install $(STAMP26)
	$(BIN)/python -m pytest -q -n $(WORKERS)
	$(VENV26)/bin/python -m pytest -q -n $(WORKERS) -m paddle

test-fast: install
	$(BIN)/python -m pytest -q -n $(WORKERS) -m 'not paddle'

test-paddle26: $(STAMP26)
	$(VENV26)/bin/python -m pytest -q -n $(WORKERS) -m paddle

lint: install
	$(BIN)/ruff check vramtune tests bench examples

bench: install
	$(BIN)/python bench/soak.py
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) $(VENV26) .vramtune .pytest_cache
