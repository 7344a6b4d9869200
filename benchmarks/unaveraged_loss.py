"""How far the trainer's old per-record loss was from the exact one (issue #39 item 7).

    python benchmarks/unaveraged_loss.py

Before, the Recorder recovered a record's loss from two of ``fit``'s running means:
``(mean_now * count_now - mean_before * count_before) / window``. The running mean is
tf_keras's own float32 ``Mean`` (tf_keras/src/engine/compile_utils.py
``LossesContainer.__call__``: ``update_state(loss, sample_weight=batch_dim)``). This feeds
that metric a falling loss (50 -> 0.02, with 10 % step noise; 3000 steps, batch 256,
a record every 10 steps) and compares the recovered record losses with the exact means of
the same steps. Prints one line. (Now the engines hand the Recorder each step's loss:
engines/step_losses.py, engines/callbacks.py.)
"""
import numpy as np, tf_keras
rng = np.random.default_rng(0)
steps, batch, k = 3000, 256, 10
# A loss that falls from 50 to ~0.02 (a regression on unscaled labels), with step noise.
losses = (50 * np.exp(-np.arange(steps) / 60) + 0.02 * (1 + 0.1 * rng.normal(size=steps))).astype(np.float32)
m = tf_keras.metrics.Mean()
means = []
for i, l in enumerate(losses):
  m.update_state(l, sample_weight=batch)
  if (i + 1) % k == 0: means.append(float(m.result()))
old, prev_mean, prev_count = [], 0.0, 0
for j, mean in enumerate(means):
  count = (j + 1) * k
  old.append((mean * count - prev_mean * prev_count) / k); prev_mean, prev_count = mean, count
exact = losses.astype(np.float64).reshape(-1, k).mean(1)
rel = np.abs(np.array(old) - exact) / exact
print(f"records {len(exact)}; old formula vs exact window mean: median rel err {np.median(rel):.2e}, max {rel.max():.2e}; last 100 records max {rel[-100:].max():.2e}; negative records {(np.array(old) < 0).sum()}")
