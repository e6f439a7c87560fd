"""Spark analytics over message traces and replication events (docs/ANALYTICS.md).

The package reads rows of the trace-message row schema (:mod:`rocketscope.spark.schema`),
decodes trace bodies and replication events, joins them and writes date-partitioned
Parquet tables.  Today the rows come from Parquet files (the synthetic generator in
:mod:`rocketscope.spark.generate`); the live-broker data source will produce the same
rows.  See docs/ANALYTICS.md.
"""
