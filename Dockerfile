# quotagate container image: the proxy only (Kafka runs elsewhere).
FROM python:3.11-slim

WORKDIR /app
COPY pyproject.toml README.md ./
COPY quotagate ./quotagate
RUN pip install --no-cache-dir . && useradd --system --uid 10001 quotagate
COPY examples/quotagate.toml /etc/quotagate/quotagate.toml

USER quotagate
# 9192: bootstrap listener; 9193+N: broker node N; 9190: Prometheus metrics.
EXPOSE 9190 9192 9194 9195 9196
ENTRYPOINT ["quotagate"]
CMD ["run", "--config", "/etc/quotagate/quotagate.toml"]
