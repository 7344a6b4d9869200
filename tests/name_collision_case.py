"""One mesh step whose loop's function names are already taken (run by
tests/test_trainer_mesh.py): a function of another body is registered under the name
DTensor gives the next mesh trace's loop body ("mesh_steps_N_/while_body", the name of
the collision seen in CI: 'Cannot add function 'mesh_steps_1_/while_body' because a
different function with the same name already exists'). Prints ``RESULT{json}`` with
the two steps' losses, or the error's text."""
import itertools
import json

from tfx_parallel.components.common import tfenv


def main():
  tfenv.split_cpu(2)
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import mesh_runtime  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.models import linear  # pylint: disable=g-import-not-at-top
  import linear_mesh_cases  # pylint: disable=g-import-not-at-top

  tr = mesh_runtime.MeshTrainer(
      lambda: linear.build_model(linear_mesh_cases.spec()), mesh_shape=(1, 1), rules=None,
      loss_fn=tf_keras.losses.MeanSquaredError(), optimizer="sgd", learning_rate=0.1,
      global_batch=linear_mesh_cases.GLOBAL_BATCH, module_name="linear")
  mesh_runtime._TRACES = itertools.count(1000)  # pylint: disable=protected-access
  taken = tf.function(lambda x: x + 1).get_concrete_function(
      tf.TensorSpec([], tf.float32)).function_def
  taken.signature.name = "mesh_steps_1000_/while_body"
  context.context().add_function_def(taken)
  try:
    losses = [tr.step(f, y) for f, y in linear_mesh_cases.batches()]
  except tf.errors.InvalidArgumentError as e:
    return {"error": str(e).splitlines()[0]}
  # Each step ran once: the losses of a plain tf_keras fit of the same model.
  ref = linear.build_model(linear_mesh_cases.spec())
  ref.compile(optimizer=tf_keras.optimizers.SGD(0.1), loss=tf_keras.losses.MeanSquaredError())
  reference = [float(ref.train_on_batch(f, y)) for f, y in linear_mesh_cases.batches()]
  return {"losses": losses, "reference": reference,
          "finite": bool(np.all(np.isfinite(losses)))}


if __name__ == "__main__":
  print("RESULT" + json.dumps(main()))
