"""MkDocs hooks.

* The home page is README.md, its links to ``docs/...`` made relative to the site
  (one text for both: what the repository shows and what the site shows).
* benchmarks/RESULTS.md and the benchmarks' own plots are published at the paths they have
  in the repository (benchmarks/RESULTS.md, benchmarks/plots/*.png, benchmarks/*.png), as
  the benchmarks write them, with no copy in docs/ to go stale.
"""
import glob
import os
import re

from mkdocs.structure.files import File

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PUBLISHED = ("benchmarks/RESULTS.md", "benchmarks/*.png", "benchmarks/plots/*.png")


def home_page(readme: str) -> str:
  """README.md as the site's index.md: ``](docs/x)`` links become ``](x)``."""
  return re.sub(r"\]\(docs/", "](", readme)


def on_files(files, config):
  with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
    files.append(File.generated(config, "index.md", content=home_page(f.read())))
  for pattern in PUBLISHED:
    for path in sorted(glob.glob(os.path.join(REPO, pattern))):
      files.append(File.generated(config, os.path.relpath(path, REPO), abs_src_path=path))
  return files
