"""Fetches uv's wheel from PyPI with the standard library alone, for a Python 3 without
pip (Debian's python3 without python3-pip or python3-venv), and unpacks its binary.

    python3 .ci/fetch_uv.py VERSION DIR     ->  DIR/bin/uv

The wheel is chosen from the index's JSON Simple API (PEP 691; PIP_INDEX_URL, else
https://pypi.org/simple) for this OS, C library and CPU, and checked against the sha256
listed there. Called
by .ci/find_python; runs on any Python 3.6+.
"""
import hashlib
import io
import json
import os
import platform
import sys
import urllib.request
import zipfile

INDEX = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"
JSON = "application/vnd.pypi.simple.v1+json"


def wheel_marks():
  """Substrings a wheel's filename must hold for this machine, e.g. ('manylinux', '_x86_64')."""
  machine = platform.machine().lower()
  if sys.platform == "darwin":
    return ("macosx", "_arm64" if machine in ("arm64", "aarch64") else "_x86_64")
  machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
  libc = "manylinux" if platform.libc_ver()[0] == "glibc" else "musllinux"
  return (libc, "_" + machine)


def pick(files, version, marks):
  """The file of the JSON Simple API's ``files`` that is uv ``version``'s wheel whose name
  holds every mark."""
  wheels = [f for f in files if f["filename"].startswith(f"uv-{version}-")
            and f["filename"].endswith(".whl") and all(m in f["filename"] for m in marks)]
  if not wheels:
    names = ", ".join(f["filename"] for f in files if f"-{version}-" in f["filename"])
    raise SystemExit(f"fetch_uv: no uv {version} wheel for {marks} among: {names or 'none'}")
  return wheels[0]


def check_digest(data, wheel):
  """Raises SystemExit unless ``data`` has the sha256 the index lists for ``wheel``."""
  digest = hashlib.sha256(data).hexdigest()
  if digest != wheel["hashes"]["sha256"]:
    raise SystemExit(f"fetch_uv: sha256 of {wheel['filename']} is {digest}, the index lists "
                     f"{wheel['hashes']['sha256']}")


def unpack(wheel_bytes, version, target):
  """Writes the wheel's uv binary to target/bin/uv (executable); returns that path."""
  member = f"uv-{version}.data/scripts/uv"
  with zipfile.ZipFile(io.BytesIO(wheel_bytes)) as z:
    data = z.read(member)
  os.makedirs(os.path.join(target, "bin"), exist_ok=True)
  path = os.path.join(target, "bin", "uv")
  with open(path + ".part", "wb") as f:
    f.write(data)
  os.chmod(path + ".part", 0o755)
  os.replace(path + ".part", path)
  return path


def main(version, target):
  request = urllib.request.Request(INDEX.rstrip("/") + "/uv/", headers={"Accept": JSON})
  with urllib.request.urlopen(request, timeout=60) as r:
    files = json.load(r)["files"]
  wheel = pick(files, version, wheel_marks())
  print(f"fetch_uv: {wheel['url']}", file=sys.stderr)
  with urllib.request.urlopen(wheel["url"], timeout=300) as r:
    data = r.read()
  check_digest(data, wheel)
  unpack(data, version, target)
  return 0


if __name__ == "__main__":
  sys.exit(main(*sys.argv[1:3]))
