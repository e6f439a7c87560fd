# The two commands a new user needs: `make demo` and `make test`.
# Both set up everything on a fresh Debian machine: the venv, the pip packages and,
# when run as root, the Debian packages the tests and benchmarks use (prometheus, chromium, nats-server).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# the C sources are in the hash: `pip install -e .` compiles them (broker/fastpath.c, broker/raftpath.c and the
# header both include, broker/store_dispatch.h), so a change to any of them recompiles both
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml setup.py broker/fastpath.c broker/raftpath.c broker/store_dispatch.h | sha1sum | cut -c1-12)
# nats-server: JetStream, the peer bench/datapath_bench.py and the chaos bench run beside the broker (docs/BENCHMARKS.md)
DEBS   := prometheus chromium nats-server
PYTEST_ARGS ?=

.PHONY: demo test test-full test-unit lint typecheck setup debs toolchain bench clean proto peers go-clients otelcol prometheus3 spark-jvm

# order-only: the toolchain is checked before every install, without forcing one
$(STAMP): | toolchain
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --progress-bar off -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

setup: $(STAMP) debs otelcol spark-jvm

# The JVM trace decoder of the analytics (spark/jvm, docs/ANALYTICS.md "Decoding"): compiled against the
# venv's pyspark jars into $(JVM_JAR), again only when its source or the venv changes (a second `make` checks
# two timestamps). A JDK is installed when we are root and javac is missing (setup runs before peers/setup.sh,
# which needs one too); without javac the analytics fall back to
# the Spark SQL decoder and say so in one INFO line.
JVM_SRC := $(shell find spark/jvm/src -name '*.java' 2>/dev/null)
JVM_JAR := build/spark-jvm/rocketscope-spark.jar
spark-jvm: $(JVM_JAR)

$(JVM_JAR): $(JVM_SRC) $(STAMP)
	@if ! command -v javac >/dev/null 2>&1 && [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing a JDK for the Spark JVM decoder (openjdk-17-jdk-headless)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    openjdk-17-jdk-headless >/dev/null; \
	fi
	@if command -v javac >/dev/null 2>&1 && command -v jar >/dev/null 2>&1; then \
	  jars="$$($(BIN)/python -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"; \
	  rm -rf build/spark-jvm/classes && mkdir -p build/spark-jvm/classes && \
	  javac -nowarn --release 17 -d build/spark-jvm/classes -cp "$$jars/*" $(JVM_SRC) && \
	  jar cf $@ -C build/spark-jvm/classes . && echo "built $@"; \
	else echo "javac is not installed: no $@; the analytics decode trace bodies with Spark SQL"; fi

# A C compiler and Python's headers: `pip install -e .` compiles the send path's C module (broker/fastpath.c,
# docs/ARCHITECTURE.md) and fails without them. Installed when we are root and they are missing; otherwise named.
toolchain:
	@inc="$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"; \
	if ! command -v cc >/dev/null 2>&1 || [ ! -f "$$inc/Python.h" ]; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing a C compiler and Python's headers (gcc, libc6-dev, python3-dev)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      gcc libc6-dev python3-dev >/dev/null; \
	  else echo "no C compiler or no $$inc/Python.h: install gcc and python3-dev; pip install -e . will fail"; fi; \
	fi

# Debian packages for the end-to-end tests; installed only when we are root and they are missing.
debs:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else echo "not root: Debian packages$$missing are missing; the tests that need them will say so"; fi; \
	fi

# Go-built peers of the Push-mode tests (tests/test_otel_collector_e2e.py, docs/PUSH.md): an
# OpenTelemetry Collector and Prometheus 3, cached under ~/.cache/rocketscope (a second run only
# checks the binary). Without go, or when a build fails, `make` goes on and the tests that need the
# binary fail (root or CI=true) or skip, naming the target.
otelcol:
	@if command -v go >/dev/null 2>&1; then bash peers/otelcol/build.sh >/dev/null \
	  || echo "the OpenTelemetry Collector build failed (above): the tests that need it will say so"; \
	else echo "go is not installed: no OpenTelemetry Collector build; the tests that need it will say so"; fi

prometheus3:
	@if command -v go >/dev/null 2>&1; then bash peers/prometheus3/build.sh >/dev/null \
	  || echo "the Prometheus 3 build failed (above): the tests that need it will say so"; \
	else echo "go is not installed: no Prometheus 3 build; the tests that need it will say so"; fi

lint: $(STAMP) typecheck
	$(BIN)/ruff check .

# mypy over the package as installed: a tree of links named like the import paths (setup.py's
# package_dir), checked with pyproject.toml's [tool.mypy] settings.
typecheck: $(STAMP)
	@rm -rf build/typecheck/rocketscope && mkdir -p build/typecheck/rocketscope
	@for f in rocketscope/*; do ln -s "$(CURDIR)/$$f" build/typecheck/rocketscope/; done
	@for d in broker telemetry trace spark dashboards; do ln -s "$(CURDIR)/$$d" build/typecheck/rocketscope/$$d; done
	cd build/typecheck && "$(CURDIR)/$(BIN)/mypy" --config-file "$(CURDIR)/pyproject.toml" -p rocketscope

# `make test` leaves out the tests marked `long` (minutes each: the chaos harness's long runs, the
# differential suite against Apache RocketMQ, the Java client run, the ground-truth latency run)
# to keep the suite well under 30 minutes; `make test-full` runs every test.
test: setup lint peers go-clients
	$(BIN)/pytest -m "not long" $(PYTEST_ARGS)

test-full: setup lint peers go-clients
	$(BIN)/pytest $(PYTEST_ARGS)

# The quick run: tests that start no process (tests/process_guard.py fails an unmarked one), without the
# minutes-long ones (`long`: all 1,500 Raft simulator seeds, where this run takes seeds 0-400 as `make test` does).
test-unit: $(STAMP) lint
	$(BIN)/pytest -m "not e2e and not long" $(PYTEST_ARGS)

demo: setup
	$(BIN)/rocketscope demo

# Apache's Go client v2 driving the remoting tests (tests/clients/go), built once into ~/.cache/rocketscope.
go-clients:
	@bash tests/clients/go/build.sh >/dev/null || echo "the Go remoting client is not built: its tests will say why"

# Apache RocketMQ 5.3.3 and 5.5.0, Apache's Java and Go clients, cached under ~/.cache/rocketscope/peers (docs/PEERS.md).
peers:
	bash peers/setup.sh

bench: setup
	$(BIN)/python bench/run.py

proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I broker/protocol --python_out=broker/protocol \
	  --grpc_python_out=broker/protocol --pyi_out=broker/protocol broker/protocol/*.proto
	sed -i -E 's/^import (\w+_pb2)/from . import \1/' broker/protocol/*_pb2*.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
