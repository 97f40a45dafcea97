#!/usr/bin/env bash
# Repository root, venv active. The raw int8 rate of this CPU, the products' rate, where a prefill slice's
# time goes, and the verify curve with pairs of panels from 6 / 4 / 3 rows.
set -euo pipefail
d=bench/results/2026-12-07-prefill-peak
g++ -O2 -march=native -fopenmp $d/peak.cpp -o /tmp/dspark-peak
uptime > $d/uptime.log
flock /tmp/dspark-cpu.lock /tmp/dspark-peak > $d/peak.txt
OMP_NUM_THREADS=1 flock /tmp/dspark-cpu.lock /tmp/dspark-peak >> $d/peak.txt
flock /tmp/dspark-cpu.lock python $d/prod.py 2>&1 | grep -v Warn > $d/prod.txt
flock /tmp/dspark-cpu.lock python $d/prof.py 2>&1 | grep -v -e Warn -e USDT > $d/prof.txt
flock /tmp/dspark-cpu.lock python $d/curve.py 6 4 3 2>&1 | grep -v Warn > $d/curve.txt
uptime >> $d/uptime.log
