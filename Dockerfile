# quotagate container image: the proxy only (Kafka runs elsewhere). Build: docker build -t quotagate .
# The configuration comes from a volume at /etc/quotagate (quotagate.toml in it, read-only is fine); the
# image ships none. What the proxy writes goes to the /var/lib/quotagate volume, which its user owns: point
# [admin] state_file and [usage] directory there (the proxy refuses to start if it cannot write them).
# The `test` stage is the image docker-compose.yml runs tests/stack from; the last stage is the proxy.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin quotagate
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY quotagate ./quotagate

# The exchange core is compiled (Cython's pure mode, then C; quotagate/compiled.py): the compiler
# stays in this stage, and the stages below install the wheel it makes.
FROM base AS wheel
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* \
    && pip wheel --no-deps --wheel-dir /wheels .

# The end-to-end tests of the compose stack, with the test extra (never the pipeline extra).
FROM base AS test
COPY --from=wheel /wheels /wheels
RUN pip install "$(ls /wheels/quotagate-*.whl)[test]"
COPY tests ./tests
COPY kafka_rig ./kafka_rig
COPY ops ./ops
USER quotagate
ENTRYPOINT ["python", "-m", "pytest", "-p", "no:cacheprovider"]
CMD ["-q", "-rs", "tests/stack"]

# The proxy: its own dependencies only (kafka-python, uvloop, prometheus-client, aiokafka for the usage sink). The PySpark pipeline
# (the `pipeline` extra) does not belong in it and is not installed.
FROM base AS proxy
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="quotagate" \
      org.opencontainers.image.description="A Kafka-protocol proxy that enforces client quotas per (user, client-id) across a whole cluster" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=wheel /wheels /wheels
RUN pip install /wheels/quotagate-*.whl && rm -rf /app /wheels
RUN mkdir -p /var/lib/quotagate && chown quotagate:quotagate /var/lib/quotagate
WORKDIR /
VOLUME ["/etc/quotagate", "/var/lib/quotagate"]
USER quotagate
# 9192: bootstrap listener; 9193+N: broker node N (9194-9196 for nodes 1-3); 9190: metrics and health.
EXPOSE 9190 9192 9194 9195 9196
# /healthz of the [metrics] listener named in the configuration; docker-compose.yml asks /readyz.
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
    CMD ["quotagate", "probe", "--config", "/etc/quotagate/quotagate.toml"]
ENTRYPOINT ["quotagate"]
CMD ["run", "--config", "/etc/quotagate/quotagate.toml"]
