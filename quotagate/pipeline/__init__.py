"""The usage pipeline on Spark: `quotagate pipeline <job>` (docs/pipeline.md).

One small module per job, each a function from DataFrames (and parameters) to DataFrames; the
SparkSession is created once, at the edge (cli.py), and passed in:

- ingest: usage records (JSONL or Parquet files, v1 or v2, or the usage Kafka topic) → one
  deduplicated table in the shape of schema.TABLE_COLUMNS;
- rollup: per entity, per topic and per tenant, per second and per minute;
- whatif: each entity's series, and each tenant's members' summed, replayed against candidate
  quotas with quotagate.quotas itself, and with Kafka's sampled-rate rule for comparison;
- recommend: the smallest quota meeting an objective, plus headroom, as TOML and kafka-configs.sh;
- apply: recommendations into the proxy's file as shadow quotas (a tenant's in its entry), promote;
- chargeback: per tenant, entity and period, each one's share of the cluster and its costs;
- report: one self-contained HTML file.

Needs the `pipeline` extra (pyspark, pandas); the proxy never imports this package.
"""
