#!/usr/bin/env bash
# Spark GPU discovery script: prints {"name":"gpu","addresses":["0","1",...]}, or an
# empty list where nvidia-smi finds none.
ids=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | sed 's/ //g' | grep . \
      | sed 's/.*/"&"/' | paste -sd, -)
echo "{\"name\": \"gpu\", \"addresses\": [${ids}]}"
