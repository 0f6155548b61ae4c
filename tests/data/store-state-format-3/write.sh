#!/bin/sh
# Writes tests/data/store-state-format-3/store: an output store in saved-state format 3, as
# fleet-goodput at commit 0853b9b (the last before either change that made format 4) wrote it.
# Run from the repository's root, with a Python that has the project's dependencies (its .venv):
#     sh tests/data/store-state-format-3/write.sh .venv/bin/python
set -eu
python=$(cd "$(dirname "${1:-.venv/bin/python}")" && pwd)/$(basename "${1:-.venv/bin/python}")  # a venv's python, its link kept
here=$(realpath tests/data/store-state-format-3)
old=$(mktemp -d)
git archive 0853b9b | tar -x -C "$old"
# The package maps these folders in as subpackages (pyproject.toml's package-dir): link them so
# that the old tree imports whole, without the installed (newer) package's folders.
for folder in pipelines transforms schemas sql configs docs; do ln -s "../$folder" "$old/fleet_goodput/$folder"; done
work=$(mktemp -d)  # the store records its own absolute path (manifest "output"): a temporary one
cp -r "$here/../store-flat-layout/fleet" "$work/fleet"
cd "$work"
# Two runs: the second's frontier (its as-of time less the allowed lateness, 1 h) is 01:30, so the
# store holds a settled window (00:00), a window settled up to the frontier (01:00), and events waiting.
for as_of in 2026-01-01T01:00:00Z 2026-01-01T02:30:00Z; do
    PYTHONPATH="$old" "$python" -m fleet_goodput.cli run --quiet --input fleet --output store --as_of "$as_of"
done
# Each run makes these anew: they are no part of what a store keeps.
rm -rf store/goodput.duckdb store/.lock store/_staging
rm -rf "$here/store"
cp -r store "$here/store"
cd /
rm -rf "$old" "$work"
