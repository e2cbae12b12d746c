#!/usr/bin/env bash
# Regenerate lakesync/proto/lakesync_pb2.py(+.pyi) from lakesync/proto/lakesync.proto.
set -euo pipefail
cd "$(dirname "$0")/.."
PATH="$PWD/.venv/bin:$PATH" .venv/bin/python -m grpc_tools.protoc -I lakesync/proto --python_out=lakesync/proto \
  --mypy_out=lakesync/proto lakesync/proto/lakesync.proto
