# Everything installs into .venv; `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[cpu,nlp,dev]'
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

demo: install
	$(BIN)/vramtune probe configs/bert-mini-cpu.yaml

test: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check vramtune tests bench examples

bench: install
	$(BIN)/python bench/soak.py
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .vramtune .pytest_cache
