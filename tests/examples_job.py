"""Run several examples one after another in one driver process, each as
``python examples/NAME ARGS`` would run it (its ``__main__``, its own argv and
its own SparkSession, stopped at its end), so that the suite starts Python and
the JVM once for all of them.

    python examples_job.py "NAME ARG ..." ["NAME ARG ..." ...]

Prints one ``RESULT <json>`` line: each example's own RESULT, or
``{"error": traceback and output}`` for one that failed.
"""

import contextlib
import io
import json
import os
import runpy
import shlex
import sys
import traceback

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
sys.path.insert(0, EXAMPLES)  # as for a script run from there: its helper modules
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def run_example(name: str, args: list) -> dict:
    out = io.StringIO()
    saved_argv = sys.argv
    sys.argv = [os.path.join(EXAMPLES, name), *args]
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(sys.argv[0], run_name="__main__")
    except BaseException:  # noqa: BLE001 - reported to that example's test
        return {"error": traceback.format_exc() + "\nstdout:\n" + out.getvalue()[-2000:]}
    finally:
        sys.argv = saved_argv
    lines = [line for line in out.getvalue().splitlines() if line.startswith("RESULT ")]
    if not lines:
        return {"error": "no RESULT line; stdout:\n" + out.getvalue()[-2000:]}
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    results = {}
    for spec in sys.argv[1:]:
        name, *args = shlex.split(spec)
        results[name] = run_example(name, args)
    print("RESULT " + json.dumps(results))


if __name__ == "__main__":
    main()
