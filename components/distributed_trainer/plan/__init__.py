"""Decisions made before training: which devices a process uses (devices.py), what the
machine says about its GPUs (gpu_env.py), which layout fits the training state (the pure
search, layout_search.py; wired to the real model and devices, layout_choice.py), and the
training-state bytes measured per device (memory.py)."""
