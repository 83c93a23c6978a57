# The README's two commands: `make demo` and `make test`. Both build .venv from this repo's files.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench bench-accuracy bench-scale clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,plot,dask]'
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p sample_data/out
	$(BIN)/dpsynth synth sample_data/patients.csv --eps 1 --schema sample_data/patients.schema.json \
		-o sample_data/out/patients.synth.csv
	$(BIN)/dpsynth synth sample_data/admissions.csv --eps 1 \
		--schema sample_data/admissions.schema.json -o sample_data/out/admissions.synth.csv
	@echo "synthetic data: sample_data/out/patients.synth.csv, sample_data/out/admissions.synth.csv"
	@echo "privacy reports: the same names + .report.json"
	@echo "to run dpsynth yourself: source .venv/bin/activate  (or .venv/bin/dpsynth)"

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
	$(BIN)/python -m benchmarks.online_speed
	$(BIN)/python -m benchmarks.psmm_speed --dense --e2e
	$(BIN)/python -m benchmarks.pca_speed
	$(BIN)/python -m benchmarks.marginals_speed

# Tables larger than memory (docs/benchmarks.md, "Scale"): generates 10^8 x 2 Parquet, 10^7 x 2
# CSV and 10^7 x 30 Parquet into benchmarks/out/scale (about 4.5 GB, not committed).
bench-scale: $(STAMP)
	$(BIN)/python -m benchmarks.scale

# Peers (smartnoise-synth needs pandas < 3 and pulls in torch) and the real tables live in a
# separate environment so they never change the test environment.
BENCH_VENV := .venv-bench

$(BENCH_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/pip install --quiet -c benchmarks/constraints.txt -e '.[bench,plot]'
	touch $@

# dpmm (the peers' MST, AIM and PrivBayes with public domains) pins numpy 1.26 and pandas 2.1,
# which dpsynth (numpy >= 2) cannot share: it gets an environment of its own, and the real-tables
# benchmark runs it in a subprocess on files (benchmarks/real_tables/peer_worker.py).
DPMM_VENV := .venv-dpmm

$(DPMM_VENV)/.installed: benchmarks/real_tables/dpmm-requirements.txt
	$(PYTHON) -m venv $(DPMM_VENV)
	$(DPMM_VENV)/bin/pip install --quiet --upgrade pip
	$(DPMM_VENV)/bin/pip install --quiet -r benchmarks/real_tables/dpmm-requirements.txt
	touch $@

bench-accuracy: $(BENCH_VENV)/.installed $(DPMM_VENV)/.installed
	$(BENCH_VENV)/bin/python -m benchmarks.accuracy --write-docs
	$(BENCH_VENV)/bin/python -m benchmarks.mixed_accuracy   # mixed tables (docs: "Mixed tables")
	$(BENCH_VENV)/bin/python -m benchmarks.real_tables --write-docs   # docs: "Real tables"

# The real-tables quick cell (diamonds and flights, n = 20,000, eps 1, 3 seeds): ours against the
# peers cached under benchmarks/out/real_tables (the first run draws them: about an hour) in a few
# minutes, e.g. make bench-real-quick OURS=auto,marginals
OURS ?= auto
.PHONY: bench-real-quick
bench-real-quick: $(BENCH_VENV)/.installed $(DPMM_VENV)/.installed
	$(BENCH_VENV)/bin/python -m benchmarks.real_tables --quick --ours $(OURS)

# Wide tables (--dim): W1 - floor on near-subspace, unstructured and real 10-30 column tables,
# against every fixed d', --dim full, MST and AIM (docs/benchmarks.md, "Wide tables"); then the
# spectrum study behind the moments' budget split.
.PHONY: bench-dim
bench-dim: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python -m benchmarks.accuracy.wide --write-docs
	$(BENCH_VENV)/bin/python -m benchmarks.dim_study spectrum
	$(BENCH_VENV)/bin/python -m benchmarks.small_wide   # small wide tables (docs: "Small wide tables")

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(DPMM_VENV) sample_data/out
