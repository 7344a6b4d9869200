"""tfx-parallel: a TFX pipeline with Beam ingest, multi-device training and MLMD metrics.

The top-level folders install as subpackages of one import package, ``tfx_parallel``
(``tfx_parallel.pipeline``, ``tfx_parallel.components``, ``tfx_parallel.kubeflow``), so
executor class paths baked into compiled pipeline specs are stable and nothing shadows
another distribution (a top-level ``kubeflow`` would shadow the Kubeflow SDK).
"""
import os

from setuptools import setup

_FOLDERS = ("pipeline", "components", "kubeflow")


def _packages():
  """Maps every package folder under the code folders to tfx_parallel.<folder>..."""
  package_dir = {}
  for folder in _FOLDERS:
    for root, dirs, files in os.walk(folder):
      dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
      if "__init__.py" in files:
        package_dir["tfx_parallel." + root.replace(os.sep, ".")] = root
  return package_dir


_PACKAGE_DIR = _packages()

setup(
    name="tfx-parallel",
    version="0.1.0",
    description=("TFX pipeline: Beam-partitioned ingest, data- and model-parallel "
                 "training (tf.distribute / DTensor), convergence metrics in ML Metadata, "
                 "Kubeflow Pipelines on GPU nodes."),
    # The full install needs Python 3.10 (tfx 1.16: 3.9-3.10; the pins of constraints.txt:
    # >= 3.10; README "Requirements"); the trainer alone (`make gpu-check`: --no-deps +
    # requirements-gpu-trainer.txt) runs on 3.10-3.12.
    python_requires=">=3.10,<3.13",
    packages=sorted(_PACKAGE_DIR),
    package_dir=_PACKAGE_DIR,
    package_data={"tfx_parallel.kubeflow": ["default_config.yaml", "Dockerfile", "gpu.yaml"]},
    install_requires=[
        "tfx[kfp]==1.16.0",
        "tensorflow>=2.16,<2.17",
        "tf-keras>=2.16,<2.17",
        # apache-beam >= 2.6x no longer pulls dill, which tfx_bsl imports.
        "dill",
        "pyyaml",
        "matplotlib",
        # Beam's S3 filesystem (apache_beam[aws]): an ingest whose Beam workers run
        # outside the pod writes s3:// and minio:// artifacts directly (kubeflow/entrypoint.py).
        "boto3",
        # TensorFlow's s3:// filesystem (registered on `import tensorflow_io`): a multi-node
        # job's replicas read and write s3:// and minio:// artifacts (kube/object_store.py).
        # 0.37.x is the line whose wheel requires tensorflow>=2.16,<2.17.
        "tensorflow-io==0.37.1",
    ],
    extras_require={
        # moto's server mode: a real S3 API on this machine (tests/test_kubeflow_s3.py).
        # vega_datasets: real data sets shipped in the package (tests/test_real_datasets.py).
        "test": ["pytest", "pytest-timeout", "pytest-xdist", "moto[server]", "vega_datasets"],
        # The ingest on a Dask cluster: Beam's DaskRunner (see README, "Ingest on Dask").
        "dask": ["dask[distributed]>=2024.4.2"],
        # The docs site (docs/, mkdocs.yml): `make docs`, and `mkdocs build --strict` in CI.
        "docs": ["mkdocs==1.6.1", "mkdocs-material==9.7.7"],
    },
    entry_points={
        "console_scripts": ["tfx-parallel=tfx_parallel.pipeline.cli:main"],
    },
)
