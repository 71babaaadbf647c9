# Rigdeck: `make run` sets up, builds and opens the app; `make test` runs every test.
# Build caches stay outside the checkout (CARGO_TARGET_DIR), so repeat runs are fast.

CARGO_TARGET_DIR ?= $(HOME)/.cache/rigdeck/target
export CARGO_TARGET_DIR
DEBUG := $(CARGO_TARGET_DIR)/debug
RELEASE := $(CARGO_TARGET_DIR)/release
ARTIFACTS ?= $(CURDIR)/tests/artifacts

.PHONY: run setup ui build package test test-rust test-package tiny-model test-ui test-e2e test-desktop test-hub test-sdk bench bench-package bench-first-reply bench-rpc bench-kld bench-download bench-gateway bench-harness bench-abuse soak lint

## run: install what is missing, build, prepare the bundled llama.cpp engine (CUDA when NVIDIA GPUs
## and nvcc are there, else CPU; reused afterwards), open the desktop app (or `rigdeck serve`
## without a display)
run: build
	@# A failed engine build (a CUDA toolkit too old for the GPUs, say) must not keep the app
	@# closed: it says why, and the Engines page offers the build again.
	$(RELEASE)/rigdeck engines build || echo "make run: the engine build failed (see above); opening Rigdeck anyway: build one on the Engines page or with 'rigdeck engines build --backend cpu'"
	$(RELEASE)/rigdeck

setup:
	bash installer/setup.sh

ui: setup
	cd ui && npm run build

## build: release binaries `rigdeck` and `rigdeck-desktop` with the UI embedded
build: ui
	cargo build --release -p rigdeck-server -p rigdeck-desktop

## package: the .deb, the .rpm and a tarball with an install script, each with a portable CPU
## llama.cpp built from the pinned source (once, then reused), in $(CARGO_TARGET_DIR)/packages
package: build
	bash installer/package.sh

## test: formatting and lints (rustfmt, clippy -D warnings), then every suite — Rust (core, server,
## NVML double), UI unit, browser end-to-end, desktop smoke, the cache shared with huggingface_hub,
## the gateway through the openai and anthropic SDKs, the packages (built, installed, used and removed)
test: lint test-rust test-ui test-e2e test-desktop test-hub test-sdk test-package
	@echo "make test: all suites passed"

# The engine build test goes first: it builds the bundled llama.cpp and ik_llama.cpp through
# Rigdeck's own build path (cached in ~/.cache/rigdeck; about 10 and 25 minutes the first time),
# which the llama-fit-params comparison and the real-engine tests then use. The llama.cpp one is
# the portable CPU build (engines/llama.cpp-<pin>-cpu-portable) the packages ship: package.sh
# reuses it.
test-rust: ui
	cargo build -p rigdeck-nvml-double -p rigdeck-server -p rigdeck-desktop
	cargo nextest run -p rigdeck-core --test engine_build --no-fail-fast
	RIGDECK_NVML_LIBRARY=$(DEBUG)/libnvml_double.so cargo nextest run --workspace --no-fail-fast

test-ui: setup
	cd ui && npm run check && npm test

# plan_bench writes the GLM-5.2-shaped split model (sparse files) the placement test plans; the
# instances test runs the cached llama-server (built by test-rust) on a tiny model with a real
# tokenizer from the llama.cpp source tree; the hub test downloads that tiny model from the fake
# hub (a local stand-in for Hugging Face).
RIGDECK_CACHE := $(or $(RIGDECK_CACHE_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/rigdeck)
test-e2e: test-rust
	mkdir -p $(ARTIFACTS)
	cargo build -p rigdeck-placement --example plan_bench
	cargo build -p rigdeck-hub --example fake_hub
	$(MAKE) tiny-model
	cd tests/e2e && RIGDECK_BIN=$(DEBUG)/rigdeck RIGDECK_NVML_LIBRARY=$(DEBUG)/libnvml_double.so \
		RIGDECK_PLAN_BENCH=$(DEBUG)/examples/plan_bench RIGDECK_TINY_MODEL=$(ARTIFACTS)/tiny.gguf \
		RIGDECK_FAKE_HUB=$(DEBUG)/examples/fake_hub \
		RIGDECK_GEMMA_MODEL="$$(bash $(CURDIR)/tests/fixtures/gemma3_270m.sh)" \
		RIGDECK_LLAMA_SERVER="$$(ls -t $(RIGDECK_CACHE)/engines/llama.cpp-*-cpu-portable/bin/llama-server | head -n 1)" \
		RIGDECK_ARTIFACTS=$(ARTIFACTS) node --test --test-concurrency=1

# A tiny llama model with a real tokenizer from the llama.cpp source tree (fetched by test-rust).
tiny-model:
	mkdir -p $(ARTIFACTS)
	cargo run -q -p rigdeck-gguf --example tiny_model -- \
		"$$(ls $(RIGDECK_CACHE)/sources/llama-cpp-python-*/llama.cpp/models/ggml-vocab-llama-bpe.gguf | head -n 1)" $(ARTIFACTS)/tiny.gguf

# The packages from the debug build the tests made: installed with dpkg (as root) and with the
# tarball's script, used against the NVML test library and the tiny model, removed again.
test-package: test-rust
	$(MAKE) tiny-model
	RIGDECK_TINY_MODEL=$(ARTIFACTS)/tiny.gguf bash tests/package/check.sh

test-desktop: test-rust
	mkdir -p $(ARTIFACTS)
	RIGDECK_NVML_LIBRARY=$(DEBUG)/libnvml_double.so RIGDECK_NVML_DOUBLE_RIG=$(CURDIR)/tests/fixtures/rigs/4x3090.json \
		bash tests/desktop/smoke.sh $(DEBUG)/rigdeck-desktop $(ARTIFACTS)

# `rigdeck pull` and huggingface_hub (from the Python package index) read each other's downloads.
test-hub: test-rust
	cargo build -p rigdeck-hub --example fake_hub
	bash tests/hub/interop.sh $(DEBUG)

# The gateway as coding agents call it: the official openai and anthropic Python SDKs (pinned,
# from the Python package index), streamed and not, back to back, on a started and an on-demand
# real llama-server (tiny model, 2 s idle timeout), with the SDKs' retries off.
test-sdk: test-rust
	$(MAKE) tiny-model
	RIGDECK_BIN=$(DEBUG)/rigdeck RIGDECK_NVML_LIBRARY=$(DEBUG)/libnvml_double.so \
		RIGDECK_TINY_MODEL=$(ARTIFACTS)/tiny.gguf \
		RIGDECK_LLAMA_SERVER="$$(ls -t $(RIGDECK_CACHE)/engines/llama.cpp-*-cpu-portable/bin/llama-server | head -n 1)" \
		bash tests/sdk/agents.sh

## bench-package: time from `dpkg -i` of the release .deb to the dashboard served with the shipped
## engine registered (needs `make package` first, and root)
bench-package:
	cargo build -p rigdeck-nvml-double
	bash tests/bench/package_install.sh

## bench-kld: KL divergence of Gemma 3 270M's quantizations and KV cache types against its F16 on
## the built-in corpus, by `rigdeck quality`; the time Rigdeck adds over llama-perplexity by hand
bench-kld:
	bash tests/bench/kld_ladder.sh

## bench-fleet: a desk over 8 paired loopback rigs (NVML doubles): the telemetry age on its fleet
## overview over 60 s (median, p95) and the desk's CPU and RSS
bench-fleet:
	cargo build --release -p rigdeck-server -p rigdeck-nvml-double
	bash tests/bench/fleet_desk.sh

## bench-rpc: llama.cpp RPC through the fleet's tunnel against the same RPC connection made
## directly, between two network namespaces on a veth shaped to 1 and 2.5 Gbit/s (root): load
## time, decode tok/s, the daemons' CPU seconds per GB moved
bench-rpc:
	cargo build --release -p rigdeck-server -p rigdeck-nvml-double
	bash tests/bench/rpc_tunnel.sh

## bench-first-reply: `rigdeck run REPO:QUANT -m TEXT` on a fresh data folder (the real Gemma 3
## 270M from the local stand-in hub): seconds to the reply, and the daemon's split
bench-first-reply:
	bash tests/bench/first_reply.sh

## bench-download: Rigdeck's downloader against `hf download` on one local fake hub (4 × 1 GiB,
## cold and with a kill -9 at 50 %): throughput and CPU per GB, as ratios
bench-download:
	bash tests/bench/download_vs_hf.sh

## bench-gateway: Rigdeck's gateway against LiteLLM's proxy on one fake engine with fixed timings
## (1, 16 and 64 streams): added latency per chunk and to the first token, throughput against
## direct, the proxy's CPU and RSS
bench-gateway:
	bash tests/bench/gateway_vs_litellm.sh

## bench-abuse: a real `rigdeck serve` abused: the admin API's latency with 1 100 idle connections
## open, /metrics before and after 10 000 made-up model names, the same profile started twice at
## once 200 times (real llama-server, tiny model)
bench-abuse: test-rust
	RIGDECK_NVML_LIBRARY=$(DEBUG)/libnvml_double.so cargo nextest run -p rigdeck-server --test abuse \
		--run-ignored only --no-capture --test-threads 1

## soak: the chaos test's mix for an hour (SOAK_SECS to change it), with its figures
SOAK_SECS ?= 3600
soak: test-rust
	RIGDECK_CHAOS_SECS=$(SOAK_SECS) RIGDECK_NVML_LIBRARY=$(DEBUG)/libnvml_double.so \
		cargo nextest run -p rigdeck-server --test chaos --no-capture

## bench-harness: `rigdeck bench` against llama-benchy on one real llama-server (the cached CPU
## build, tiny model; 1 and 4 streams): TTFT, per-stream and aggregate tok/s, prefill, as ratios,
## beside the engine's own figures
bench-harness:
	bash tests/bench/bench_vs_llama_benchy.sh

## bench: telemetry cost of `rigdeck serve` (8 GPUs + host at 1 Hz, 60 s idle and 60 s with a browser),
## then reading + planning a GLM-5.2-shaped split model, and its headers over HTTP
bench: ui
	cargo build --release -p rigdeck-server -p rigdeck-nvml-double
	cd tests/e2e && RIGDECK_BIN=$(RELEASE)/rigdeck RIGDECK_NVML_LIBRARY=$(RELEASE)/libnvml_double.so \
		node ../bench/telemetry.mjs
	cargo run --release -p rigdeck-placement --example plan_bench
	cargo run --release -p rigdeck-gguf --example read_bench

lint: setup
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
