# The README's two commands: `make demo` and `make test`. Both build .venv from this repo's files.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench bench-accuracy clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,plot]'
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p sample_data/out
	$(BIN)/dpsynth synth sample_data/patients.csv --eps 1 --schema sample_data/patients.schema.json \
		-o sample_data/out/patients.synth.csv
	@echo "synthetic data: sample_data/out/patients.synth.csv"
	@echo "privacy report: sample_data/out/patients.synth.csv.report.json"

test: $(STAMP)
	$(BIN)/ruff check dpsynth_cli tests benchmarks
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check dpsynth_cli tests benchmarks
	$(BIN)/ruff format --check dpsynth_cli tests benchmarks

bench: $(STAMP)
	$(BIN)/python -m benchmarks.speed
	$(BIN)/python -m benchmarks.w1_speed
	$(BIN)/python -m benchmarks.noise_speed

clean:
	rm -rf $(VENV) sample_data/out
