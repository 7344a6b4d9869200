"""Loaded by the child processes of tests that put this folder on PYTHONPATH
(standin.env, pause.env). Production code has no test hook (issue #39 item 9); these
patch it from outside:

* ``TFXP_STANDIN_GPUS=N``: the process plans and trains on N stand-in GPUs (standin.py);
* ``TFXP_TEST_PAUSE_BEFORE_COMMIT=<step>``: that step's checkpoint pauses before its
  commit (pause.py);
* ``TFXP_TEST_RSS_LOG=<path>``: the training process logs its memory at each boundary
  of its run (rss.py).
"""
import os

if os.environ.get("TFXP_STANDIN_GPUS", "").strip():
  import standin  # pylint: disable=g-import-not-at-top
  standin.install()
if os.environ.get("TFXP_TEST_PAUSE_BEFORE_COMMIT", "").strip():
  import pause  # pylint: disable=g-import-not-at-top
  pause.install()
if os.environ.get("TFXP_TEST_RSS_LOG", "").strip():
  import rss  # pylint: disable=g-import-not-at-top
  rss.install()
