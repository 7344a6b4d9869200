"""Each mesh execution's input (engines/mesh_engine.py ``stacked_executions``): tf.data
stacks the batches of each execution, in the lengths of engines/epochs.py (ends at
multiples of k, at epoch ends, at the run's end, from a resumed run's mid-epoch step),
with the values, dtypes and order that stacking the batches one by one gives."""
import numpy as np
import pytest

# (start_step, total, steps_per_epoch, k)
RUNS = [(0, 23, 23, 10),   # one epoch; the run's end cuts the last execution
        (0, 95, 40, 10),   # epochs of 40: 10, 10, 10, 10, then 10, ... 5 at the run's end
        (13, 95, 40, 10),  # resumed mid-epoch: 7 to the next multiple of 10
        (41, 120, 25, 10),  # resumed; epochs of 25 end executions at 5
        (7, 8, 3, 4),      # one step left
        (0, 5, 5, 1)]      # k = 1


def _batches():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  n = 40
  features = {"x": rng.normal(size=(n, 4, 3)).astype(np.float32),
              "color": rng.integers(0, 9, size=(n, 4, 1)).astype(np.int64)}
  labels = rng.normal(size=(n, 4, 1)).astype(np.float32)
  return tf.data.Dataset.from_tensor_slices((features, labels)).repeat()


@pytest.mark.parametrize("start,total,spe,k", RUNS)
def test_each_execution_stacks_its_batches_in_the_epochs_lengths(start, total, spe, k):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import epochs as ep  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import mesh_engine  # pylint: disable=g-import-not-at-top
  ds = _batches()
  lengths = ep.execution_lengths(start, total, spe, k)
  got = list(mesh_engine.stacked_executions(ds, lengths, k))
  assert [int(labels.shape[0]) for _, labels in got] == lengths
  one_by_one = iter(ds)
  for n, stacked in zip(lengths, got):
    want = tf.nest.map_structure(lambda *t: tf.stack(t), *[next(one_by_one) for _ in range(n)])
    tf.nest.assert_same_structure(want, stacked)
    for w, g in zip(tf.nest.flatten(want), tf.nest.flatten(stacked)):
      assert w.dtype == g.dtype and w.shape == g.shape
      np.testing.assert_array_equal(w.numpy(), g.numpy())


def test_a_length_outside_one_to_k_is_refused():
  from tfx_parallel.components.distributed_trainer.engines import mesh_engine  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match=r"lengths: each between 1 and k=4. Received: \[4, 5\]"):
    mesh_engine.stacked_executions(_batches(), [4, 5], 4)
