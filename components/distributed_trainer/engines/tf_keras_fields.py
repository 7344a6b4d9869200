"""The error an engine raises when a private tf_keras field it relies on is gone.

Both engines reach past tf_keras's public surface in a few places (the mesh:
mesh_runtime.py; the fit engine: fit_engine.py ``check_private_hooks``). Each such field
is named in a constant beside its use, checked where used (never guessed with a
default), pinned by tests/test_trainer_tf_keras_fields.py, and reported by this error,
which names the installed tf_keras version: a tf_keras upgrade that drops a field fails
at once, before training, not with an AttributeError deep in ``fit`` or a run that
silently restarts its epoch.
"""


class TfKerasFieldError(RuntimeError):
  """A private tf_keras field that ``user`` (a layout) relies on is missing in this
  tf_keras."""

  def __init__(self, field: str, where: str, user: str = "mesh layout",
               other_way: str = "or use another layout"):
    import tf_keras  # pylint: disable=g-import-not-at-top
    super().__init__(f"{user}: tf_keras {tf_keras.__version__} has no {field} ({where}); "
                     f"the {user} relies on it and was checked against tf_keras 2.16. "
                     f"Install the tf_keras of constraints.txt, {other_way}.")
