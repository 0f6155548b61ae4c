#!/bin/sh
# Writes tests/data/state-before-step-ledger/key-state.pickle and continued.json: one job's saved key
# state as fleet-goodput at commit 1c707bc (the last before core/step_ledger.py) pickled it, its step
# spans' classes named in core/timeline.py, and the figures that commit's code gives continuing it.
# Run from the repository's root, with a Python that has the project's dependencies (its .venv):
#     sh tests/data/state-before-step-ledger/write.sh .venv/bin/python
set -eu
python=$(cd "$(dirname "${1:-.venv/bin/python}")" && pwd)/$(basename "${1:-.venv/bin/python}")  # a venv's python, its link kept
here=$(realpath tests/data/state-before-step-ledger)
old=$(mktemp -d)
git archive 1c707bc fleet_goodput | tar -x -C "$old"
PYTHONPATH="$old" "$python" "$here/write.py" "$here" "$old"
rm -rf "$old"
