"""User modules, one hook each, for tests/test_trainer_hooks.py (imported by module_path)."""
