#!/usr/bin/env bash
# Spark GPU discovery script: prints {"name":"gpu","addresses":["0","1",...]}.
ids=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | sed 's/ //g' | paste -sd, - | sed 's/,/","/g')
echo "{\"name\": \"gpu\", \"addresses\": [\"${ids}\"]}"
