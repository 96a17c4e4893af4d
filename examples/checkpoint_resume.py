"""Checkpoint and resume: a fit stopped half-way continues to the same model.

The first fit runs 20 of 40 Adam steps, checkpointing parameters, optimizer
state, step and RNG every 5 steps (as a killed job would leave them). The second
fit, with the same checkpointDir and maxIter=40, resumes at step 20; its model is
bit-identical to a 40-step fit that never stopped.

    python examples/checkpoint_resume.py [--rows 20000] [--master local[2]]
"""

from __future__ import annotations

import json
import tempfile

import numpy as np
from example_data import arguments, assembled, session

from gradspark import SGDLogisticRegression


def main() -> None:
    args = arguments(__doc__, rows=20_000)
    spark = session(args.master, "gradspark-checkpoints")
    data = assembled(spark, args.rows)
    params = dict(optimizer="adam", stepSize=0.05, miniBatchFraction=0.5, seed=11, tol=0.0)
    with tempfile.TemporaryDirectory() as directory:
        def fit(steps: int, checkpoint_dir: str = ""):
            return SGDLogisticRegression(maxIter=steps, checkpointDir=checkpoint_dir,
                                         checkpointInterval=5, **params).fit(data)

        fit(20, directory)  # "killed" after 20 steps
        resumed = fit(40, directory)
        straight = fit(40)
    same = bool(np.array_equal(resumed.coefficients.toArray(), straight.coefficients.toArray())
                and resumed.intercept == straight.intercept)
    result = {"resumed_from": resumed.summary.extra.get("resumedFromStep"),
              "identical_to_uninterrupted": same,
              "final_loss": resumed.summary.objectiveHistory[-1]}
    print(f"resumed at step {result['resumed_from']}; identical to an uninterrupted fit: {same}")
    print("RESULT " + json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()
