"""Hook: a custom layout rule: the hidden kernel split by rows (its bias stays whole)."""

from hook_modules.model import build_model  # noqa: F401  pylint: disable=unused-import


def layout_rules(spec):
  del spec
  return {r"hidden/kernel": ("model", None)}
