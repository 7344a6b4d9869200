"""Parses Kubernetes executor configs strictly with the proto one KFP backend pins.

    python strict_parse.py PROTO_DIR CONFIGS.json

Run with an interpreter that has ``grpcio-tools`` (tests/test_kubeflow_kfp.py makes one
in .venv-kfp-protoc). PROTO_DIR holds the ``kubernetes_executor_config.proto`` of one
kubeflow/pipelines commit; it is compiled with protoc (``grpc_tools.protoc``) into a
temporary directory and each ``{executor label: KubernetesExecutorConfig JSON}`` of
CONFIGS.json is parsed with unknown fields rejected, as the backends through 2.4.0 parse
it (``jsonpb.UnmarshalString`` in ``backend/src/v2/cmd/driver/main.go``). One process per
proto: every pinned version has the same proto package name.

Prints ``{label: "ok" | the parse error}`` as JSON; exits 0 unless the proto does not
compile.
"""
import importlib
import json
import os
import sys
import tempfile

import grpc_tools
from google.protobuf import json_format
from grpc_tools import protoc


def main(proto_dir, configs_path):
  with open(configs_path) as f:
    configs = json.load(f)
  out = tempfile.mkdtemp(prefix="kfp-proto-")
  include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
  status = protoc.main(["protoc", f"-I{proto_dir}", f"-I{include}", f"--python_out={out}",
                        os.path.join(proto_dir, "kubernetes_executor_config.proto")])
  if status != 0:
    print(f"protoc failed on {proto_dir} with status {status}", file=sys.stderr)
    return 2
  sys.path.insert(0, out)
  module = importlib.import_module("kubernetes_executor_config_pb2")
  results = {}
  for label, config in sorted(configs.items()):
    try:
      json_format.ParseDict(config, module.KubernetesExecutorConfig(),
                            ignore_unknown_fields=False)
      results[label] = "ok"
    except json_format.ParseError as e:
      results[label] = str(e)
  print(json.dumps(results, sort_keys=True))
  return 0


if __name__ == "__main__":
  sys.exit(main(*sys.argv[1:]))
