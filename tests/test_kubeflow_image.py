"""The image recipe (kubeflow/Dockerfile) against where each claimed KFP launcher writes.

The image runs as ``USER 1000``. Before the component's command starts, the open-source
KFP launcher (running as that user, in the image) creates each artifact's local
directory below ``LocalPathForURI(uri)`` with ``os.MkdirAll`` and downloads the inputs
there; without a volume at ``/gcs``, ``/minio`` or ``/s3`` a non-root user cannot create
that first directory at ``/`` and the step fails with "permission denied". The table
below is read from kubeflow/pipelines at each tag (``git show <tag>:<path>``); every
backend from ``platform_spec.OLDEST_BACKEND`` on must find its locations writable.
"""
import os
import re
import shlex

import pytest

from tfx_parallel.kubeflow import platform_spec

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# tag -> (top-level directories the launcher creates below, citing LocalPathForURI and
# prepareOutputFolders in backend/src/v2/component/launcher_v2.go; directories mounted as
# emptyDir by the Argo compiler, backend/src/v2/compiler/argocompiler/container.go).
# /tmp (the legacy output file /tmp/kfp_outputs/output_metadata.json,
# OutputMetadataFilepath) is python:3.10-slim's own, mode 1777.
LAUNCHER_WRITES = {
    # launcher_v2.go:167 (Execute calls prepareOutputFolders), :701-712 localPathForURI,
    # :714-737 prepareOutputFolders (MkdirAll at
    # :733), :375 OutputMetadataFilepath; container.go mounts only kfp-launcher.
    "2.1.0": (("/gcs", "/minio", "/s3", "/tmp"), ()),
    # launcher_v2.go:714-725, :727-750 (MkdirAll at :746), :380.
    "2.2.0": (("/gcs", "/minio", "/s3", "/tmp"), ()),
    # container.go:37-47 gcsScratchLocation, s3ScratchLocation, minioScratchLocation
    # (commit 65839ced31, first in 2.3.0); launcher_v2.go:713-724, :726-749, :379.
    "2.3.0": (("/gcs", "/minio", "/s3", "/tmp"), ("/gcs", "/minio", "/s3")),
    # master 7b70c7b: container.go:58-68; launcher_v2.go:1239-1251 LocalPathForURI (also
    # /oci for oci:// model cars, which this package never uses), :1280-1304, :526.
    "master": (("/gcs", "/minio", "/s3", "/tmp"), ("/gcs", "/minio", "/s3")),
}
BASE_IMAGE_WRITABLE = ("/tmp",)  # Debian's /tmp: drwxrwxrwt.


def _version(tag):
  return (float("inf"),) if tag == "master" else tuple(int(p) for p in tag.split("."))


def _instructions(text):
  """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined."""
  joined = re.sub(r"\\\n", " ", text)
  lines = [l.strip() for l in joined.splitlines() if l.strip() and not l.lstrip().startswith("#")]
  return [(l.split(None, 1)[0].upper(), l.split(None, 1)[1] if " " in l else "") for l in lines]


def _user(instructions):
  users = [args for name, args in instructions if name == "USER"]
  assert users, "the Dockerfile sets no USER"
  return users[-1].split(":")[0]


def writable_dirs(text, uid):
  """Directories the recipe creates (``install -d``, before the final USER) that `uid`
  can create entries in: owned by it with owner write, or world-writable."""
  instructions = _instructions(text)
  last_user = max(i for i, (name, _) in enumerate(instructions) if name == "USER")
  found = set()
  for name, args in instructions[:last_user]:
    if name != "RUN":
      continue
    lexer = shlex.shlex(args, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands, current = [], []
    for token in lexer:
      if token in ("&&", ";", "||"):
        commands.append(current)
        current = []
      else:
        current.append(token)
    for words in commands + [current]:
      if not words or words[0] != "install" or "-d" not in words:
        continue
      owner, mode, paths, i = "0", "0755", [], 1
      while i < len(words):
        if words[i] in ("-o", "-g", "-m"):
          if words[i] == "-o":
            owner = words[i + 1]
          elif words[i] == "-m":
            mode = words[i + 1]
          i += 2
          continue
        if not words[i].startswith("-"):
          paths.append(words[i])
        i += 1
      bits = int(mode, 8)
      if (owner == uid and bits & 0o200) or bits & 0o002:
        found.update(paths)
  return found


def unwritable(text, tag):
  """The launcher write locations of backend `tag` that the image's user cannot use."""
  uid = _user(_instructions(text))
  created, mounted = LAUNCHER_WRITES[tag]
  writable = writable_dirs(text, uid) | set(BASE_IMAGE_WRITABLE)
  return sorted(d for d in created if d not in mounted and d not in writable)


def _dockerfile():
  with open(os.path.join(REPO, "kubeflow", "Dockerfile"), encoding="utf-8") as f:
    return f.read()


CLAIMED = [tag for tag in LAUNCHER_WRITES
           if _version(tag) >= _version(platform_spec.OLDEST_BACKEND)]


def test_every_claimed_backend_is_in_the_table():
  assert platform_spec.OLDEST_BACKEND in LAUNCHER_WRITES
  assert CLAIMED == ["2.1.0", "2.2.0", "2.3.0", "master"]


@pytest.mark.parametrize("tag", CLAIMED)
def test_the_image_user_can_write_where_the_launcher_writes(tag):
  assert _user(_instructions(_dockerfile())) == "1000"
  assert unwritable(_dockerfile(), tag) == []


def test_the_check_fails_without_the_directories():
  """The recipe as it was: 2.1.0 and 2.2.0 fail, the backends with emptyDirs do not."""
  text = re.sub(r"\nRUN install -d [^\n]*", "", _dockerfile())
  assert text != _dockerfile()
  assert {tag: unwritable(text, tag) for tag in CLAIMED} == {
      "2.1.0": ["/gcs", "/minio", "/s3"], "2.2.0": ["/gcs", "/minio", "/s3"],
      "2.3.0": [], "master": []}
  root_owned = _dockerfile().replace("install -d -o 1000 -g 0 -m 0775", "install -d -m 0755")
  assert unwritable(root_owned, "2.1.0") == ["/gcs", "/minio", "/s3"]
