"""Loaded by the replica processes tests/fake_kube.py runs for JobSet pods with
`local_network` (PYTHONPATH): JobSet's hostnames (`<trainjob>-node-0-<i>.<trainjob>`) do
not resolve on this machine, so after the replica has derived its TF_CONFIG from the
JobSet environment (the real trainjob.tf_config_from_jobset, unchanged) each
`host:port` is replaced by the 127.0.0.1 port the fake gave that hostname
(FAKE_KUBE_HOSTS, a JSON map). A hostname the fake did not give a pod is a KeyError:
the derivation must name exactly JobSet's hostnames.

The hostnames follow the sources trainjob.py cites: the Job name
``<jobset>-<replicatedJob>-<jobIndex>`` (kubernetes-sigs/jobset v0.10.1
pkg/util/placement/placement.go:14-15), the pod hostname ``<job>-<completion index>``
(kubernetes pkg/controller/job/job_controller.go, ``template.Spec.Hostname``), and the
subdomain defaulting to the JobSet's name (jobset pkg/controllers/jobset_controller.go:
708-712)."""
import json
import os

from tfx_parallel.components.distributed_trainer.kube import trainjob

_derive = trainjob.tf_config_from_jobset


def _on_local_ports(environ):
  config = _derive(environ)
  if config:
    hosts = json.loads(os.environ["FAKE_KUBE_HOSTS"])
    parsed = json.loads(config)
    parsed["cluster"] = {kind: [hosts[h] for h in workers]
                         for kind, workers in parsed["cluster"].items()}
    config = json.dumps(parsed)
  return config


trainjob.tf_config_from_jobset = _on_local_ports
