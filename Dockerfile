# One image for both sides of a Dataflow job (docs/dataflow.md):
#   - the Flex Template launcher, which runs templates/launch.py (fleet_goodput/runs/launcher.py) to submit the job;
#   - the SDK container every worker runs (--sdk_container_image), so workers
#     have this project and exactly the pinned dependencies preinstalled and
#     install nothing at start-up.
# Build it with Cloud Build (there is no Docker daemon needed locally):
#   gcloud builds submit . --tag "$IMAGE"
# The Beam SDK image's tag must equal the apache-beam pin in requirements-dataflow.txt,
# and both images are Python 3.11, like that file's resolution.

ARG BEAM_VERSION=2.77.0
# Pin a dated tag (or a digest) of the launcher base for reproducible builds;
# the tags are listed at gcr.io/dataflow-templates-base/python311-template-launcher-base.
ARG LAUNCHER_TAG=latest

FROM apache/beam_python3.11_sdk:${BEAM_VERSION} AS beam_sdk

FROM gcr.io/dataflow-templates-base/python311-template-launcher-base:${LAUNCHER_TAG}

# The worker boot program (and what it needs) from the Beam SDK image makes
# this image usable as a custom SDK container.
COPY --from=beam_sdk /opt/apache/beam /opt/apache/beam

ARG WORKDIR=/template
WORKDIR ${WORKDIR}

# Dependencies first: this layer is rebuilt only when the pins change. Only what
# the launcher and the workers import (no DuckDB, Great Expectations, scipy,
# pandas or tqdm); pip check proves the pinned set is complete and consistent.
COPY requirements-dataflow.txt .
RUN pip install --no-cache-dir -r requirements-dataflow.txt && pip check

COPY pyproject.toml README.md ./
COPY fleet_goodput fleet_goodput
COPY pipelines pipelines
COPY transforms transforms
COPY schemas schemas
COPY configs configs
COPY sql sql
COPY docs/__init__.py docs/metric.md docs/
COPY templates/launch.py templates/launch.py
# --no-deps: everything the launcher and the workers need is pinned above; a
# resolver here could drift. (pip check would now flag the project's own
# dependencies that workers never use, so the import below checks instead.)
RUN pip install --no-cache-dir --no-deps . \
    && python -c "import fleet_goodput.runs.launcher, fleet_goodput.pipelines.streaming"

# The Flex Template launcher runs this file with the template's parameters; it
# only calls fleet_goodput.runs.launcher.main() from the installed package.
# Nothing else is staged at launch: no setup file, no requirements file.
ENV FLEX_TEMPLATE_PYTHON_PY_FILE="${WORKDIR}/templates/launch.py"

# Workers start the Beam SDK harness. A Flex Template launch starts
# /opt/google/dataflow/python_template_launcher itself (as in Google's
# pipeline_with_dependencies sample, which uses one image the same way).
ENTRYPOINT ["/opt/apache/beam/boot"]
