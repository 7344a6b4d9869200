"""No zero-byte "directory" objects in an output the next step's launcher downloads.

TensorFlow's GCS filesystem makes a directory by uploading an empty object named
``<dir>/`` (tensorflow/tensorflow ``tsl/platform/cloud/gcs_file_system.cc``
``GcsFileSystem::CreateDir``: ``MaybeAppendSlash(dirname)``, ``uploadType=media`` with an
empty body), and ``tf.io.gfile.makedirs`` does so for every level. A step that writes its
outputs at their remote URIs (a multi-node trainer, ``entrypoint.artifact_paths``: a trainer whose
replicas write the model, or a Beam runner outside the pod) leaves such objects in its
artifacts. The KFP launcher of the next step downloads every object under the
artifact's prefix as a file (kubeflow/pipelines ``backend/src/v2/objectstore/
object_store.go`` master:176-205 ``DownloadBlob``: ``sanitizeDownloadPath`` joins the
key's relative path, so ``model/Format-Serving/`` becomes the file ``.../Format-Serving``,
and ``model/`` the artifact's own path); the next object below it then fails in
``downloadFile``'s ``os.MkdirAll`` with "not a directory" (kubeflow/pipelines#13476, open
on 2.16.1 and master). So after the executor has written its outputs, the step's entry
point deletes the zero-byte keys ending in ``/`` under each output written remotely
(:func:`remove`). Object stores have no directories, so nothing else changes: every
file's key is unchanged, and TensorFlow still reads the directories (``FolderExists``
lists the prefix).

A store is a pair of calls, ``list(bucket, prefix) -> [(key, size)]`` and
``delete(bucket, keys)``: :class:`S3Store` (boto3: S3, MinIO, SeaweedFS) and
:class:`GcsStore` (google-cloud-storage).
"""
import logging
from typing import Iterable, List, Optional, Sequence, Tuple

# Schemes of the stores whose keys are listed here; minio:// is KFP's name for S3 on MinIO.
_S3_SCHEMES = ("s3://", "minio://")
_GCS_SCHEME = "gs://"


def split_uri(uri: str) -> Tuple[str, str]:
  """(bucket, key prefix without a trailing slash) of ``scheme://bucket/key``."""
  bucket, _, key = uri.split("://", 1)[1].partition("/")
  return bucket, key.rstrip("/")


def marker_keys(objects: Iterable[Tuple[str, int]], prefix: str) -> List[str]:
  """The keys of zero-byte objects ending in ``/`` at or under `prefix` (the artifact's
  own ``<prefix>/`` included), in listing order."""
  prefix = prefix.rstrip("/")
  return [key for key, size in objects
          if key.endswith("/") and size == 0
          and (key == prefix + "/" or key.startswith(prefix + "/"))]


class S3Store:
  """S3 API through a boto3 client."""

  def __init__(self, client):
    self.client = client

  def list(self, bucket: str, prefix: str) -> List[Tuple[str, int]]:
    pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                  Prefix=prefix)
    return [(o["Key"], o["Size"]) for page in pages for o in page.get("Contents", [])]

  def delete(self, bucket: str, keys: Sequence[str]) -> None:
    for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys.
      response = self.client.delete_objects(Bucket=bucket, Delete={
          "Objects": [{"Key": k} for k in keys[start:start + 1000]], "Quiet": True})
      if response.get("Errors"):
        first = response["Errors"][0]
        raise OSError(f"could not delete the directory object s3://{bucket}/"
                      f"{first.get('Key')}: {first.get('Code')} {first.get('Message')}")


class GcsStore:
  """Cloud Storage through google-cloud-storage (the pod's default credentials)."""

  def __init__(self, client=None):
    if client is None:
      from google.cloud import storage  # pylint: disable=g-import-not-at-top
      client = storage.Client()
    self.client = client

  def list(self, bucket: str, prefix: str) -> List[Tuple[str, int]]:
    return [(b.name, b.size or 0) for b in self.client.list_blobs(bucket, prefix=prefix)]

  def delete(self, bucket: str, keys: Sequence[str]) -> None:
    handle = self.client.bucket(bucket)
    for key in keys:
      handle.blob(key).delete()


def remove(uri: str, store) -> List[str]:
  """Deletes the directory objects of the artifact at `uri`; returns their keys."""
  bucket, prefix = split_uri(uri)
  keys = marker_keys(store.list(bucket, prefix), prefix)
  if keys:
    store.delete(bucket, keys)
    logging.info("Deleted %d zero-byte directory object(s) under %s, which the KFP "
                 "launcher would download as files (kubeflow/pipelines#13476)", len(keys), uri)
  return keys


def _beam_flag(beam_args: Sequence[str], name: str) -> Optional[str]:
  for i, arg in enumerate(beam_args):
    if arg.startswith(f"--{name}="):
      return arg.split("=", 1)[1]
    if arg == f"--{name}" and i + 1 < len(beam_args):
      return beam_args[i + 1]
  return None


def s3_client(beam_args: Sequence[str] = (), endpoint: Optional[str] = None,
              verify: bool = True):
  """A boto3 S3 client: the endpoint and keys of Beam's S3 options when the step has
  them (``--s3_endpoint_url``, ``--s3_access_key_id``, ``--s3_secret_access_key``,
  ``--s3_region_name``), else `endpoint` (the multi-node step's store, which the entry
  point set up: ``TFX_PARALLEL_S3_ENDPOINT`` or the launcher's session; boto3 does not
  read TensorFlow's ``S3_ENDPOINT``), else boto3's own chain (``AWS_ENDPOINT_URL``,
  ``AWS_ACCESS_KEY_ID``..., as Beam's workers read them)."""
  import boto3  # pylint: disable=g-import-not-at-top
  options = {"endpoint_url": _beam_flag(beam_args, "s3_endpoint_url") or endpoint,
             "aws_access_key_id": _beam_flag(beam_args, "s3_access_key_id"),
             "aws_secret_access_key": _beam_flag(beam_args, "s3_secret_access_key"),
             "region_name": _beam_flag(beam_args, "s3_region_name")}
  return boto3.client("s3", verify=verify, **{k: v for k, v in options.items() if v})


def store_for(uri: str, beam_args: Sequence[str] = (), s3_endpoint: Optional[str] = None,
              s3_verify: bool = True):
  """The store that holds `uri`; None for a path (nothing to clean)."""
  if uri.startswith(_S3_SCHEMES):
    return S3Store(s3_client(beam_args, s3_endpoint, s3_verify))
  if uri.startswith(_GCS_SCHEME):
    return GcsStore()
  return None


def remove_all(uris: Iterable[str], beam_args: Sequence[str] = (),
               s3_endpoint: Optional[str] = None, s3_verify: bool = True) -> List[str]:
  """:func:`remove` for every remote URI of `uris` (one client per scheme); returns
  every deleted key. `s3_endpoint`, `s3_verify`: the S3 API of a multi-node step's
  store (:func:`s3_client`)."""
  stores = {}
  deleted = []
  for uri in uris:
    if "://" not in uri:
      continue
    scheme = uri.split("://", 1)[0]
    if scheme not in stores:
      stores[scheme] = store_for(uri, beam_args, s3_endpoint, s3_verify)
    if stores[scheme] is not None:
      deleted.extend(remove(uri, stores[scheme]))
  return deleted
