# The README's two commands: `make demo` and `make test`. Both build .venv from this repo's files.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench bench-accuracy clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/dpsynth synth sample_data/two_clusters.csv --eps 1 \
		--bounds x=0:1 --bounds y=0:1 -o sample_data/out/two_clusters.synth.csv
	@echo "synthetic data: sample_data/out/two_clusters.synth.csv"
	@echo "privacy report: sample_data/out/two_clusters.synth.csv.report.json"

test: $(STAMP)
	$(BIN)/ruff check dpsynth_cli tests benchmarks
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check dpsynth_cli tests benchmarks
	$(BIN)/ruff format --check dpsynth_cli tests benchmarks

bench: $(STAMP)
	$(BIN)/python -m benchmarks.speed

clean:
	rm -rf $(VENV) sample_data/out
