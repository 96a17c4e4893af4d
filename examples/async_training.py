"""Async mode: workers push gradients to a parameter server on the driver (SSP).

The same Adam fit runs bulk-synchronously (maxStaleness=0, which equals sync
mode) and with bounded staleness 2 while one partition is a straggler; the
summary shows the staleness reached and the final losses.

    python examples/async_training.py [--rows 20000] [--master local[2]]
"""

from __future__ import annotations

import json

from example_data import arguments, assembled, session

from gradspark import SGDLogisticRegression


def main() -> None:
    args = arguments(__doc__, rows=20_000)
    spark = session(args.master, "gradspark-async")
    data = assembled(spark, args.rows)
    common = dict(optimizer="adam", stepSize=0.05, maxIter=100, miniBatchFraction=0.5,
                  mode="async", parameterServerHost="127.0.0.1")
    result = {}
    for staleness in (0, 2):
        model = SGDLogisticRegression(maxStaleness=staleness, **common).fit(data)
        extra = model.summary.extra
        result[f"staleness_{staleness}"] = {
            "final_loss": model.summary.objectiveHistory[-1],
            "max_staleness_seen": extra["maxStaleness"],
            "updates": extra["updatesApplied"]}
        print(f"maxStaleness={staleness}: loss {model.summary.objectiveHistory[-1]:.5f}, "
              f"staleness seen {extra['maxStaleness']}")
    print("RESULT " + json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()
