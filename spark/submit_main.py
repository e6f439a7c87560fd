"""spark-submit entry point: ``spark-submit [options] spark/submit_main.py all --input ... --output ...``.

The arguments are those of ``rocketscope analyze``; the master comes from spark-submit
(``--master`` of the subcommand is ignored unless given).  The ``rocketscope`` package
must be importable by the driver and by the executors' Python (deploy/spark/README.md).
"""

from __future__ import annotations

from rocketscope.spark.cli import main

if __name__ == "__main__":
    main()
