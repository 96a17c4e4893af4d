"""Load exported pipelines with MLlib's reader and score rows, in a driver process that
never imports gradspark and whose executors have no usable Python (spark.pyspark.python
is /bin/false): MLlib's JVM transform must need neither.

argv: input Parquet path, then pipeline paths; RESULT maps each pipeline's directory
name to its scores."""

import json
import os
import sys

from job_support import quiet_session  # noqa: E402
from pyspark.ml import PipelineModel  # noqa: E402

if __name__ == "__main__":
    os.environ["PYSPARK_PYTHON"] = "/bin/false"  # (job_support set it to this interpreter)
    spark = quiet_session("local[2]")
    rows = spark.read.parquet(sys.argv[1])
    result = {}
    for pipeline_path in sys.argv[2:]:
        scored = PipelineModel.load(pipeline_path).transform(rows)
        columns = [c for c in ("id", "prediction", "rawPrediction", "probability")
                   if c in scored.columns]
        out = {c: [] for c in columns}
        for row in scored.orderBy("id").select(*columns).collect():
            for c in columns:
                value = row[c]
                out[c].append(value.toArray().tolist() if hasattr(value, "toArray") else value)
        result[os.path.basename(pipeline_path)] = out
    result["gradspark_imported"] = any(m.startswith("gradspark") for m in sys.modules)
    print("RESULT " + json.dumps(result))
    spark.stop()
