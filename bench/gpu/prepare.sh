#!/usr/bin/env bash
# Run here, with network, before a session lent a GPU calls check.sh: downloads into .gpu/whl the
# wheels the device's image lacks for the trainer's in-process path and the tests (about 15 MB; the
# device tool carries at most 64 MiB). The image has Python 3.12 with torch, transformers, peft,
# numpy, pandas and pyarrow; the project itself is not installed there but copied from the checkout.
#   bash bench/gpu/prepare.sh            # then: run(command="bash bench/gpu/check.sh", carry=[".gpu"])
set -eu
cd "$(dirname "$0")/../.."
# GPU_DIR and PY_VERSION=3.11 make a set for this machine's Python, to rehearse check.sh here.
GPU_DIR=${GPU_DIR:-.gpu}
PY_VERSION=${PY_VERSION:-3.12}
WHL=$GPU_DIR/whl
PYTHON=${PYTHON:-.venv/bin/python}
mkdir -p "$WHL"
rm -f "$WHL"/*.whl
get() {
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$WHL" "$@"
}
# verl's in-process import set (its ray is bench/gpu/ray_standin: ray's wheel alone is over the limit).
get verl==0.9.1 tensordict==0.10.0 pyvers==0.1.0 codetiming==1.4.0 omegaconf==2.3.1 datasets==5.2.0 dill==0.4.1 \
    multiprocess==0.70.19 orjson==3.13.0 xxhash==4.1.0 pydantic==2.14.4 pydantic_core==2.50.5 annotated_types==0.8.0 \
    typing_inspection==0.4.5 typing_extensions==4.16.0 fastapi==0.165.0 starlette==1.10.0 annotated-doc==0.0.7 \
    uvicorn==0.54.0 opentelemetry_api==1.45.2
# The project's own imports (parity.api, the services' logging) and the tests' runner.
# The tests' conftest loads the service fixtures, which import grpc's health stubs and psycopg.
get grpcio==1.85.1 grpcio-health-checking==1.85.1 grpcio-reflection==1.85.1 psycopg==3.3.9 psycopg-binary==3.3.9 \
    protobuf==7.36.2 structlog==26.1.0 pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 \
    pytest-timeout==2.4.0 pytest-asyncio==1.5.0
# omegaconf's antlr4-python3-runtime 4.9.3 is an sdist only: its pure-Python wheel is built here.
"$PYTHON" -m pip wheel -q --no-deps -w "$WHL" antlr4-python3-runtime==4.9.3
du -sh "$GPU_DIR"
