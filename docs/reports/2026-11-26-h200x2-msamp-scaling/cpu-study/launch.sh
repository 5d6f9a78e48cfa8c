#!/bin/bash
# usage: launch.sh MODE [extra args]  -> results/<tag>.jsonl, logs/<tag>.log
# MSAMP_TREE: MS-AMP's snapshot with patches/ms-amp applied (bench/images/series.py apply);
# BENCH_MEGATRON_PYTHON: the tests' Python 3.12 with torch. Data: data.bin (train.py --help).
cd "$(dirname "$0")"
export PYTHONPATH=${MSAMP_TREE:?the patched MS-AMP tree} CUDA_VISIBLE_DEVICES=
PY=${BENCH_MEGATRON_PYTHON:?a Python 3.12 with torch}
mode=$1; shift
tag=${TAG:-$mode}
mkdir -p logs
nohup $PY -W ignore train.py --mode $mode --tag $tag "$@" > logs/$tag.log 2>&1 &
echo $! > logs/$tag.pid
