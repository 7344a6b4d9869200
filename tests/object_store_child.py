"""A separate process for the tests that open s3:// files through TensorFlow (tensorflow-io).

tensorflow-io 0.37.1's S3 client aborts the interpreter's teardown (SIGABRT, exit 134:
object_store.run_and_exit), which would turn a passing pytest run into a crash, so the
executor side of those tests runs here and ends with ``os._exit``. Reads one JSON
request on stdin, writes one JSON answer on stdout's last line:

* ``{"do": "probe", "directories": [D, ...], "environ": {...}, "host": URL,
  "read": URI}``: the entry point's set-up (object_store.prepare_executor for the
  directories, the secret read from the API server at `host`), the text of `read`
  through TensorFlow, then from_uris + probe of each D; the answer's ``ok`` is
  ``{"read": text, "probes": [one answer per directory]}``.
* ``{"do": "run", "job": {...}, "settings": {...}, "host": URL, "environ": {...}}``:
  kube.launch.run of a train.Job against the API server at `host` (tests/fake_kube.py).

The answer is ``{"ok": ...}`` or ``{"error": exception type, "message": text}``.
"""
import json
import os
import sys

from tfx.dsl.components.base import base_executor

from tfx_parallel.components.distributed_trainer.kube import object_store


class ReadWriteExecutor(base_executor.BaseExecutor):
  """A step's executor for the entry point test: reads ``data.txt`` of its input
  ``examples`` and writes ``model.txt`` (the input text, then the URIs it was given) to
  its output ``model``, both through TensorFlow's filesystems, as the trainer would."""

  def Do(self, input_dict, output_dict, exec_properties):  # pylint: disable=invalid-name
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    examples, model = input_dict["examples"][0].uri, output_dict["model"][0].uri
    with tf.io.gfile.GFile(f"{examples}/data.txt") as f:
      text = f.read()
    with tf.io.gfile.GFile(f"{model}/model.txt", "w") as f:
      f.write(json.dumps({"read": text, "examples": examples, "model": model}))


def _api_client(host: str):
  from kubernetes import client  # pylint: disable=g-import-not-at-top
  configuration = client.Configuration()
  configuration.host = host
  return client.ApiClient(configuration)


def _probe(directory: str) -> dict:
  try:
    object_store.probe(directory, object_store.from_uris({"directory": directory}, os.environ))
    return {"ok": True}
  except Exception as e:  # pylint: disable=broad-except  # Returned to the test.
    return {"error": type(e).__name__, "message": str(e)}


def _answer() -> dict:
  request = json.loads(sys.stdin.read())
  os.environ.update(request.get("environ", {}))
  if request["do"] == "probe":
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    object_store.prepare_executor({"read": request["read"]}, os.environ,
                                  _api_client(request["host"]))
    with tf.io.gfile.GFile(request["read"]) as f:
      text = f.read()
    return {"ok": {"read": text, "probes": [_probe(d) for d in request["directories"]]}}
  try:
    from tfx_parallel.components.distributed_trainer.kube import client as kube_client  # pylint: disable=g-import-not-at-top
    from tfx_parallel.components.distributed_trainer.kube import launch as kube_launch  # pylint: disable=g-import-not-at-top
    from tfx_parallel.components.distributed_trainer.kube import settings as kube_settings  # pylint: disable=g-import-not-at-top
    from tfx_parallel.components.distributed_trainer.run.train import Job  # pylint: disable=g-import-not-at-top
    settings = dict(request["settings"])
    settings["tolerations"] = tuple(settings.get("tolerations", ()))
    result = kube_launch.run(Job(**request["job"]), kube_settings.TFJobSettings(**settings),
                       client=kube_client.TFJobClient(_api_client(request["host"])),
                       poll_seconds=0.5)
    return {"ok": {"state": result.state, "message": result.message,
                   "logs": result.logs, "restarts": result.restarts}}
  except Exception as e:  # pylint: disable=broad-except  # Returned to the test.
    return {"error": type(e).__name__, "message": str(e)}


if __name__ == "__main__":
  print("\n" + json.dumps(_answer()), flush=True)
  sys.stderr.flush()
  os._exit(0)  # pylint: disable=protected-access  # See the module docstring.
