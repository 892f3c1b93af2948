# quotagate — `make demo` runs the main job, `make test` runs every test. Both set themselves up.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
KAFKA_LIBS := .cache/kafka/libs
RIG := $(PY) -m kafka_rig
BROKERS ?= 1

.PHONY: all venv kafka-jars kafka-up kafka-down kafka-cluster-up kafka-cluster-down demo test test-fast lint docs bench clean

all: venv kafka-jars

# The virtualenv is rebuilt whenever pyproject.toml changes; the install compiles the proxy's
# Cython modules (setup.py) in place, so it is redone when their sources change too.
$(VENV)/.installed: pyproject.toml setup.py $(wildcard quotagate/*/*.pxd quotagate/*/*_c.py)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# Apache Kafka broker + tools jars from Maven Central, cached in an ignored folder.
$(KAFKA_LIBS)/.fetched: kafka/pom.xml
	mvn -q -f kafka/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(KAFKA_LIBS) -DincludeScope=runtime
	touch $@

kafka-jars: $(KAFKA_LIBS)/.fetched

# Spark's Kafka source (and what it needs beyond PySpark's own jars) for `quotagate pipeline ingest`
# from the usage topic: fetched once from Maven Central, passed to Spark with spark.jars.
SPARK_KAFKA_JARS := .cache/spark-kafka/jars
$(SPARK_KAFKA_JARS)/.fetched: spark/pom.xml
	rm -rf $(SPARK_KAFKA_JARS)
	mvn -q -f spark/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(SPARK_KAFKA_JARS) -DincludeScope=runtime
	touch $@

.PHONY: spark-kafka-jars
spark-kafka-jars: $(SPARK_KAFKA_JARS)/.fetched

# More jars from Maven Central, each set by a pom of its own into a folder of its own under .cache:
# Delta Lake (the usage table's format) and S3A (s3a:// URIs), passed to Spark with spark.jars unless
# the user gives them (docs/pipeline.md, "Jars"); S3Proxy and Hadoop's HDFS daemons, the object
# store and HDFS the storage tests start on 127.0.0.1.
define fetch-jars
	rm -rf $(dir $@)
	mvn -q -f $< dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(dir $@) -DincludeScope=runtime
	touch $@
endef
SPARK_DELTA_JARS := .cache/spark-delta/jars
SPARK_S3A_JARS := .cache/spark-s3a/jars
S3PROXY_JARS := .cache/s3proxy/jars
HDFS_JARS := .cache/hadoop-hdfs/jars
$(SPARK_DELTA_JARS)/.fetched: spark/delta/pom.xml
	$(fetch-jars)
$(SPARK_S3A_JARS)/.fetched: spark/s3a/pom.xml
	$(fetch-jars)
$(S3PROXY_JARS)/.fetched: spark/s3proxy/pom.xml
	$(fetch-jars)
$(HDFS_JARS)/.fetched: spark/hdfs/pom.xml
	$(fetch-jars)

.PHONY: spark-delta-jars spark-s3a-jars storage-test-jars
spark-delta-jars: $(SPARK_DELTA_JARS)/.fetched
spark-s3a-jars: $(SPARK_S3A_JARS)/.fetched
storage-test-jars: $(SPARK_S3A_JARS)/.fetched $(S3PROXY_JARS)/.fetched $(HDFS_JARS)/.fetched

kafka-up: venv kafka-jars
	$(RIG) up --brokers $(BROKERS)

kafka-down: venv
	$(RIG) down

kafka-cluster-up: venv kafka-jars
	$(RIG) up --brokers 3

kafka-cluster-down: venv
	$(RIG) down --name dev3

demo: venv kafka-jars spark-delta-jars
	$(PY) -m scripts.demo

# PYTEST_ARGS adds pytest options, e.g. PYTEST_ARGS="--durations=60" for the slowest phases or -m "not slow".
PYTEST_ARGS ?=
# The whole suite on PYTEST_WORKERS pytest-xdist workers (0: in one process). Its tests wait on quotas and
# brokers more than they use CPU: on this 2-core machine, in one process it took ~1 075 s of pytest, on two
# workers 645 s, on three 598 s. The workers share one Kafka (tests/support/kafka_fixtures.py); tests/conftest.py
# keeps the Spark tests, the users of the 3-node cluster and the machine-wide runs each on one worker and
# starts them first; each worker picks its own ports above the ephemeral range (tests/support/proxy_fixtures.py).
PYTEST_WORKERS ?= 3
# The runs make test leaves to targets of their own: every marker named *_only in pyproject.toml (its text names
# its target).
NOT_IN_MAKE_TEST := $(shell sed -n 's/^ *"\([a-z_]*_only\):.*/not \1/p' pyproject.toml | paste -sd' ' | sed 's/ not / and not /g')
# make test runs the version slice beside the whole run (the slice's Kafkas 25 and 50 ports above the run's: clear
# of its clusters' ports, which are 100 apart), and prints the slice's output after the run's.
test: venv kafka-jars spark-kafka-jars spark-delta-jars storage-test-jars prometheus-tools compose-tools helm-tool chromium redis-tools tmux-tool franz-go-suite go-kadm-quotas
	$(VENV)/bin/ruff check .
	QUOTAGATE_NO_EXTENSIONS=1 $(PY) -m pytest -q -p no:cacheprovider tests/unit  # the same sources, interpreted
	mkdir -p build/slice
	$(MAKE) --no-print-directory test-slice SLICE_FIRST_OFFSET=$(SLICE_PORT_STEP) > build/slice/all.log 2>&1 & slice=$$!; \
	$(PY) -m pytest -q -rs --durations=15 -n $(PYTEST_WORKERS) -m "$(NOT_IN_MAKE_TEST)" $(PYTEST_ARGS); status=$$?; \
	wait $$slice || status=1; cat build/slice/all.log; exit $$status

# The version_slice tests against each Kafka of KAFKA_SLICE, all at once: each run's ports SLICE_PORT_STEP above
# the one before (QUOTAGATE_TEST_PORT_OFFSET + SLICE_FIRST_OFFSET for the first), the ports it picks in a lane of
# its own (QUOTAGATE_TEST_PORT_LANE 1 to 5: tests/support/proxy_fixtures.py), its output in
# build/slice/VARIANT.log, printed when all are done.
SLICE_PORT_STEP ?= 25
SLICE_FIRST_OFFSET ?= 0
.PHONY: test-slice
test-slice: venv franz-go-suite
	$(RIG) fetch $(KAFKA_SLICE)
	mkdir -p build/slice
	offset=$$(( $${QUOTAGATE_TEST_PORT_OFFSET:-0} + $(SLICE_FIRST_OFFSET) )); lane=1; pids=""; for kafka in $(KAFKA_SLICE); do \
		QUOTAGATE_TEST_PORT_LANE=$$lane QUOTAGATE_TEST_PORT_OFFSET=$$offset KAFKA_RIG_KAFKA=$$kafka $(PY) -m pytest -q -rs -p no:cacheprovider \
			-m version_slice tests/integration > build/slice/$$kafka.log 2>&1 & pids="$$pids $$!"; offset=$$((offset + $(SLICE_PORT_STEP))); lane=$$((lane + 1)); \
	done; status=0; for pid in $$pids; do wait $$pid || status=1; done; \
	for kafka in $(KAFKA_SLICE); do echo "--- Kafka $$kafka"; cat build/slice/$$kafka.log; done; exit $$status

# The long end-to-end runs (marker long_only: half a minute to minutes each, the same features as quicker tests
# of make test): the quick soak, the rolling restart, the compose files' brokers and stack run locally, 30 s of
# /readyz behind SSL, the whole pipeline from generated data, the Sentinel failover of shared quotas, non-finite
# quotas through kafka-configs.sh.
.PHONY: test-long
test-long: venv kafka-jars spark-kafka-jars spark-delta-jars compose-tools helm-tool redis-tools
	$(PY) -m pytest -q -rs --durations=15 -n $(PYTEST_WORKERS) -m long_only tests $(PYTEST_ARGS)

# The Kafka versions the matrix runs, as kafka_rig names them ("-zk": ZooKeeper mode): 3.9 in ZooKeeper and
# KRaft mode, 4.0, 4.2 (kafka/pom.xml's, the default) and 4.4. `make test` runs the version_slice tests
# against KAFKA_SLICE besides its whole run against the default (~100 s more: the 3.9 run is the longer).
KAFKA_MATRIX ?= 3.9.1-zk 3.9.1 4.0.2 4.2.0 4.4.0
KAFKA_SLICE ?= 3.9.1-zk 4.4.0
MATRIX_RESULTS := build/matrix

# The protocol-facing integration tests (marker `matrix`) against every Kafka of KAFKA_MATRIX, one after the
# other (each version's jars fetched once into .cache/kafka-versions); the results table (version x test)
# lands in build/matrix/table.md for docs/compatibility.md. ~10-15 min per version on this machine.
.PHONY: test-matrix
test-matrix: venv kafka-jars redis-tools franz-go-suite
	$(RIG) fetch $(KAFKA_MATRIX)
	mkdir -p $(MATRIX_RESULTS)
	status=0; for kafka in $(KAFKA_MATRIX); do \
		KAFKA_RIG_KAFKA=$$kafka $(PY) -m pytest -q -rs -m matrix -n $(PYTEST_WORKERS) \
			--junitxml=$(MATRIX_RESULTS)/$$kafka.xml tests/integration $(PYTEST_ARGS) || status=1; \
	done; \
	$(PY) -m scripts.matrix_table $(MATRIX_RESULTS) $(KAFKA_MATRIX) | tee $(MATRIX_RESULTS)/table.md; exit $$status

# Every canary attack of tests/integration/test_tenant_isolation.py (make test runs the heaviest) and the
# topic flood with usage records on: what each adds, through the proxy, to the p99 of a client on
# another connection (printed with -s).
.PHONY: test-canary
test-canary: venv kafka-jars
	QUOTAGATE_CANARY_ATTACKS=all $(PY) -m pytest -q -s -p no:randomly tests/integration/test_tenant_isolation.py \
		tests/integration/test_usage_topic_flood.py $(PYTEST_ARGS)

# The pipeline where platform teams run it (tests/pipeline/test_storage.py): `quotagate pipeline all` on a
# standalone Spark cluster of two workers against S3Proxy and against HDFS, both started on 127.0.0.1,
# then the same ingest again: minutes a store, over ten under load, so make test leaves it to this target
# (storage_only) and keeps the storage code's quicker tests (test_table.py, test_spark_jars.py).
.PHONY: test-storage
test-storage: venv kafka-jars spark-kafka-jars spark-delta-jars storage-test-jars
	$(PY) -m pytest -q -rs --durations=10 -p no:randomly tests/pipeline/test_storage.py $(PYTEST_ARGS)

# Consumers at a small quota with large fetches (tests/integration/test_fetch_quota_shape.py): each client
# library's received rate and longest gap, proxied and direct with a broker-side quota, and two connections of
# one client sharing a quota with their fetch sessions kept. 1-2 min a test, so not in make test, whose slice of
# the same decisions is tests/unit/test_throttled_fetch.py (both compiled and interpreted).
.PHONY: test-fetch-shape
test-fetch-shape: venv kafka-jars
	$(PY) -m pytest -q -rs -s --durations=10 -p no:randomly tests/integration/test_fetch_quota_shape.py $(PYTEST_ARGS)

# The inner loop: tests/unit alone, no Kafka, JVM, socket, process, tool or sleep (tests/unit/conftest.py
# fails a test that uses one), well under a minute. The rest: tests/loopback (sockets on 127.0.0.1,
# quotagate as a process), tests/tools (promtool, compose tools, java), tests/integration (Kafka, Redis).
test-fast: venv
	$(PY) -m pytest -q tests/unit

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# docs/configuration.md, generated from the config dataclasses' field metadata, and docs/metrics.md, from the
# metric collectors; a test fails when either is stale.
docs: venv
	$(PY) -m quotagate config-reference > docs/configuration.md.tmp
	mv docs/configuration.md.tmp docs/configuration.md
	$(PY) -m quotagate metrics-reference > docs/metrics.md.tmp
	mv docs/metrics.md.tmp docs/metrics.md
	$(PY) -m quotagate.proxy.usage_fields  # the usage fields' tables and the collectors' generated sections

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache

# quotagate against direct and against haproxy (TCP mode), on one broker, in one run: produce,
# consume, small requests, 200 connections, latency at half load. Prints a table and writes
# bench/results/latest.json. Figures only: targets are reported, never asserted. See bench/README.md.
bench: venv kafka-jars
	bash scripts/ensure_debian_tools.sh haproxy haproxy
	$(PY) -m bench.run
	$(PY) -m bench.hot_path
	$(PY) -m bench.tls
	$(MAKE) --no-print-directory bench-shared
	$(MAKE) --no-print-directory bench-redis-cost
	$(MAKE) --no-print-directory bench-compare

# Workers and shared quotas: 1 and 2 workers, local and through Redis; MB/s, requests/s and Redis
# commands per 10 000 requests (bench/results/shared.json; about 4 minutes). See docs/scaling.md.
.PHONY: bench-shared
bench-shared: venv kafka-jars redis-tools
	$(PY) -m bench.shared $(BENCH_SHARED_ARGS)

# Figures to hold against other proxies' published ones: end-to-end latency (produce to consume, avg and
# p99 with the spread over rounds) at three fixed produce rates, direct vs haproxy vs quotagate, and each
# proxy's CPU in millicores per MB/s (bench/results/compare.json; ~8 min, --quick ~4). See bench/README.md.
.PHONY: bench-compare
bench-compare: venv kafka-jars
	bash scripts/ensure_debian_tools.sh haproxy haproxy
	$(PY) -m bench.compare $(BENCH_COMPARE_ARGS)

# What one lease call costs Redis (CPU per call) on one server and on a 3-primary Redis Cluster, and
# so the busy triples a primary carries (bench/results/redis-cost.json; ~30 s). See docs/scaling.md.
.PHONY: bench-redis-cost
bench-redis-cost: venv redis-tools
	$(PY) -m bench.redis_cost $(BENCH_REDIS_COST_ARGS)

# The same workloads, shorter and with fewer rounds: under 3 minutes with the Kafka start.
# TLS on both sides against plaintext on both sides: produce MB/s and the proxy's CPU per GB (~4 min;
# also the end of make bench). bench/results/tls-latest.json.
.PHONY: bench-tls
bench-tls: venv kafka-jars
	$(PY) -m bench.tls

# What a client can make the proxy hold before it authenticates: RSS with two slow 90 MB frames (~15 s).
.PHONY: bench-preauth-memory
bench-preauth-memory: venv
	$(PY) -m bench.preauth_memory

.PHONY: bench-client-id-memory
bench-client-id-memory: venv
	$(PY) -m bench.client_id_memory

# The proxy's RSS with usage records off, as aggregates (Parquet) and per request (JSONL) (~4 min).
.PHONY: bench-usage-memory
bench-usage-memory: venv
	$(PY) -m bench.usage_memory

# The proxy's Python cost per exchange, in-process, without sockets (~15 s; also the end of make bench).
.PHONY: bench-hot-path
bench-hot-path: venv
	$(PY) -m bench.hot_path

# The pipeline's rollup and what-if throughput on 10 M synthetic records, local[2] (bench/pipeline.py).
.PHONY: bench-pipeline
bench-pipeline: venv spark-delta-jars storage-test-jars
	$(PY) -m bench.pipeline

# The soak and chaos runs of issue 12 (bench/README.md, "Soak and chaos"); loopback, ports 25092-25809
# (+ SOAK_PORT_BASE - 25000), every process stopped by pid; results in bench/results/{soak,chaos}.json.
# make soak: one broker, mixed quotas, mixed real clients (Java, kafka-python, aiokafka, confluent-kafka)
# for SOAK_SECONDS (10 min by default; + ~1 min of setup). make chaos: 3 brokers, two kill -9s and
# restarts under an acks=all idempotent producer, then every acknowledged record read back (~4 min).
SOAK_SECONDS ?= 600
SOAK_PORT_BASE ?= 25000
CHAOS_PHASE_SECONDS ?= 20
.PHONY: soak chaos
soak: venv kafka-jars
	$(PY) -m bench.soak --seconds $(SOAK_SECONDS) --port-base $(SOAK_PORT_BASE)

chaos: venv kafka-jars
	$(PY) -m bench.chaos --phase-seconds $(CHAOS_PHASE_SECONDS) --port-base $(SOAK_PORT_BASE)

# Two versions of quotagate in the same rounds, beside haproxy and the uvloop floor (bench/floor_forwarder.py):
# CPU per small produce request of each, and B over A (bench/ab.py; ~2 min). AB_B=DIR: version B's
# package directory (a checkout or worktree); AB_ARGS adds options (--rounds, --workloads ...).
AB_B ?= .
AB_ARGS ?=
.PHONY: bench-ab
bench-ab: venv kafka-jars
	bash scripts/ensure_debian_tools.sh haproxy haproxy
	$(PY) -m bench.ab --b $(AB_B) $(AB_ARGS)

.PHONY: bench-quick
bench-quick: venv kafka-jars
	bash scripts/ensure_debian_tools.sh haproxy haproxy
	$(PY) -m bench.run --quick

# Two parsers of docker-compose.yml for its tests, both offline (no Docker engine is needed or used).
# First docker-compose v1 from PyPI (`docker-compose config`), in its own venv under .cache.
COMPOSE_VENV := .cache/compose-venv
$(COMPOSE_VENV)/.installed: scripts/compose-tools-constraints.txt
	test -x $(COMPOSE_VENV)/bin/python || $(PYTHON) -m venv $(COMPOSE_VENV)
	PIP_CONSTRAINT=$(CURDIR)/scripts/compose-tools-constraints.txt $(COMPOSE_VENV)/bin/pip install -q docker-compose
	touch $@

# And compose-go, the loader of `docker compose` v2, as a small Go program (scripts/compose_check),
# with Go's module and build caches under .cache/go.
COMPOSE_CHECK := .cache/compose-check/composecheck
GO_ENV := GOMODCACHE=$(CURDIR)/.cache/go/mod GOCACHE=$(CURDIR)/.cache/go/build GOFLAGS=-modcacherw GOTOOLCHAIN=local
$(COMPOSE_CHECK): scripts/compose_check/main.go scripts/compose_check/go.mod scripts/compose_check/go.sum
	cd scripts/compose_check && $(GO_ENV) go build -o $(CURDIR)/$(COMPOSE_CHECK) .

.PHONY: compose-tools
compose-tools: $(COMPOSE_VENV)/.installed $(COMPOSE_CHECK)

# franz-go's own kgo test suite (github.com/twmb/franz-go, pkg/kgo) as a test binary, built from the module
# (Go module proxy) with the caches above; the version tests run part of it through the proxy against each
# Kafka (tests/support/franz_go.py; ~2 min the first time).
FRANZ_GO_VERSION := v1.22.3
FRANZ_GO_SUITE := .cache/franz-go/$(FRANZ_GO_VERSION)/kgo.test
$(FRANZ_GO_SUITE):
	mkdir -p $(dir $(FRANZ_GO_SUITE))
	$(GO_ENV) go mod download github.com/twmb/franz-go@$(FRANZ_GO_VERSION)
	cd .cache/go/mod/github.com/twmb/franz-go@$(FRANZ_GO_VERSION) && $(GO_ENV) nice go test -c -o $(CURDIR)/$(FRANZ_GO_SUITE) ./pkg/kgo

.PHONY: franz-go-suite
franz-go-suite: $(FRANZ_GO_SUITE)

# Helm, built from its Go module (the network reaches only package registries: no release binary), renders
# and lints deploy/helm/quotagate in its test; cached under .cache/helm like compose-check (~6 min the first time).
HELM_VERSION := v3.22.0
HELM := .cache/helm/$(HELM_VERSION)/helm
$(HELM):
	mkdir -p $(dir $(HELM))
	$(GO_ENV) GOBIN=$(CURDIR)/$(dir $(HELM)) nice go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

.PHONY: helm-tool
helm-tool: $(HELM)

# Go clients' quota admin calls through the proxy and direct (tests/integration/test_quota_admin_go_clients.py):
# franz-go's kadm driven by tests/go/kadm_quotas, and IBM/sarama's own functional TestFuncAdminQuotas with the
# toxiproxy server its suite needs (run in a network namespace by tests/go/sarama_quotas.py), built from their Go
# modules with the module and build caches under .cache/go-quota-suites (~3 min the first time).
GO_QUOTA_SUITES := .cache/go-quota-suites
GO_QUOTA_ENV := GOMODCACHE=$(CURDIR)/$(GO_QUOTA_SUITES)/mod GOCACHE=$(CURDIR)/$(GO_QUOTA_SUITES)/build GOFLAGS=-modcacherw GOTOOLCHAIN=local
SARAMA_VERSION := v1.61.1
TOXIPROXY_VERSION := v2.12.0
$(GO_QUOTA_SUITES)/kadm_quotas: tests/go/kadm_quotas/main.go tests/go/kadm_quotas/go.mod tests/go/kadm_quotas/go.sum
	cd tests/go/kadm_quotas && $(GO_QUOTA_ENV) go build -o $(CURDIR)/$@ .
$(GO_QUOTA_SUITES)/sarama_functional.test:
	$(GO_QUOTA_ENV) go mod download github.com/IBM/sarama@$(SARAMA_VERSION)
	cd $(GO_QUOTA_SUITES)/mod/github.com/\!i\!b\!m/sarama@$(SARAMA_VERSION) && $(GO_QUOTA_ENV) nice go test -c -tags functional -o $(CURDIR)/$@ .
$(GO_QUOTA_SUITES)/bin/server:
	$(GO_QUOTA_ENV) GOBIN=$(CURDIR)/$(GO_QUOTA_SUITES)/bin nice go install github.com/Shopify/toxiproxy/v2/cmd/server@$(TOXIPROXY_VERSION)

.PHONY: go-kadm-quotas go-quota-clients
go-kadm-quotas: $(GO_QUOTA_SUITES)/kadm_quotas
go-quota-clients: $(GO_QUOTA_SUITES)/kadm_quotas $(GO_QUOTA_SUITES)/sarama_functional.test $(GO_QUOTA_SUITES)/bin/server

# sarama's run (a 3-node cluster in a network namespace, about a minute) is not in make test, which runs kadm's.
.PHONY: test-sarama-quotas
test-sarama-quotas: venv kafka-jars go-quota-clients
	$(PY) -m pytest -q -rs -s --durations=5 -m sarama_only tests/integration/test_quota_admin_go_clients.py $(PYTEST_ARGS)

# Headless Chromium (Debian's package) renders the pipeline's HTML report in its test.
.PHONY: chromium
chromium:
	bash scripts/ensure_debian_tools.sh chromium chromium

# tmux (Debian's package): tests/integration/test_top.py runs `quotagate top` in it, sends keys and reads the screen.
.PHONY: tmux-tool
tmux-tool:
	bash scripts/ensure_debian_tools.sh tmux tmux

# redis-server (Debian's package; the service is not left running) for the shared-quota tests and bench.
.PHONY: redis-tools
redis-tools:
	bash scripts/ensure_debian_tools.sh redis-server redis-server

# promtool and prometheus (Debian's prometheus package; the service is not left running) for the ops/ tests.
.PHONY: prometheus-tools
prometheus-tools:
	bash scripts/ensure_debian_tools.sh prometheus promtool prometheus
