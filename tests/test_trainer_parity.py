"""Parity of the data-parallel layouts on the user model of issue #12 (an embedding of a
string feature, two Dense layers, a multiclass head), each run in its own process:

* ``single`` equals plain tf_keras ``model.fit`` on the same batches with the same
  optimizer (the trainer's machinery changes nothing);
* ``mirrored`` x2 equals ``single``.

(Mesh parity is covered with the mesh layout's own tests.)
"""
import json
import os
import textwrap

import numpy as np
import pytest

import trainer_util as tu

MODULE = os.path.join(os.path.dirname(__file__), "parity_model.py")
CONFIG = dict(steps=12, epochs=1, batch_size=32, learning_rate=0.01, optimizer="adam",
              log_every=4, checkpoint_every=0, module_file=MODULE,
              tf32=False)  # Exact float32 where the layouts run on Ampere+ GPUs.

# Plain tf_keras: the same batches (materialised from the trainer's input pipeline with the
# same seed), the same module, seed and optimizer; model.fit on numpy arrays.
_PLAIN_FIT = textwrap.dedent("""
    import json
    from tfx_parallel.components.common import tfenv
    tfenv.prepare()
    import numpy as np, tensorflow as tf, tf_keras
    tf.config.set_visible_devices([], "GPU")  # As the trainer's device: cpu (trainer_util).
    tf.config.experimental.enable_tensor_float_32_execution(False)
    from tfx_parallel.components.common.splits import split_files
    from tfx_parallel.components.distributed_trainer.inputs import tf_data
    from tfx_parallel.components.distributed_trainer.run import train
    from tfx_parallel.components.distributed_trainer import user_module
    from tfx_parallel.components.distributed_trainer.inputs.preprocess import Preprocessor
    job = train.Job(**json.load(open({job_path!r})))
    config = job.trainer_config()
    spec, norm = train.resolve_spec(job, config)
    pre = Preprocessor(spec, norm)
    tf_keras.utils.set_random_seed(config.seed)  # As the trainer: seeds the shuffle too.
    cache, _ = train.input_cache_plan(config, spec, job.train_rows)  # As the trainer.
    ds = tf_data.training_dataset(split_files(job.examples_uri, "train"), pre,
                               config.batch_size, cache=cache["mode"], seed=config.seed,
                               shuffle_buffer=config.shuffle_buffer)
    batches = list(ds.take(config.steps))
    x = {{k: np.concatenate([b[0][k].numpy() for b in batches]) for k in spec.feature_names}}
    y = np.concatenate([b[1].numpy() for b in batches])
    module = user_module.load(config.module_file)
    tf_keras.utils.set_random_seed(config.seed)
    model = module.build_model(spec)
    model.compile(optimizer=tf_keras.optimizers.Adam(config.learning_rate),
                  loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=config.batch_size, shuffle=False, epochs=1, verbose=0)
    trained = tf_keras.models.load_model(job.model_dir, compile=False)
    print("RESULT" + json.dumps({{"task": spec.task, "y": y.ravel().tolist()[:64],
                                 "plain": [w.tolist() for w in model.get_weights()],
                                 "ours": [w.tolist() for w in trained.get_weights()]}}))
""")


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("cls"))
  numeric, strings, rows = tu.write_classification_examples(root, rows=1024)
  return root, numeric, strings, rows


def _train(examples, tmp, layout, **extra):
  root, numeric, strings, rows = examples
  job = tu.job_dict(tmp, root, numeric, rows, layout=layout, **dict(CONFIG, **extra))
  job["string_feature_keys"] = strings
  history = tu.run_job(job, tmp)
  return job, history


def _compare(theirs, ours, what, **tol):
  assert len(theirs) == len(ours), what
  for i, (a, b) in enumerate(zip(theirs, ours)):
    np.testing.assert_allclose(np.array(b), np.array(a), err_msg=f"{what}: weight {i}", **tol)


@pytest.fixture(scope="module")
def single(examples, tmp_path_factory):
  tmp = str(tmp_path_factory.mktemp("single"))
  job, history = _train(examples, tmp, "single")
  path = os.path.join(tmp, "job.json")
  result = json.loads(tu.run_script(_PLAIN_FIT.format(job_path=path)).split("RESULT", 1)[1])
  return history, result


@pytest.mark.slow
def test_single_matches_plain_model_fit_on_the_same_batches(single):
  history, result = single
  assert history["task"] == "multiclass" and history["num_classes"] == 3
  assert set(result["y"]) == {0, 1, 2}  # class ids, all three classes present
  assert [r["step"] for r in history["records"]] == [4, 8, 12]
  assert history["input_cache"]["mode"] == "memory"  # The default cache "auto", tiny data.
  _compare(result["plain"], result["ours"], "single vs plain fit", rtol=1e-6, atol=1e-7)
  # The weights moved: the comparison is not between two untrained models.
  init_embedding = np.array(result["ours"][0])
  assert np.abs(init_embedding).max() > 0


@pytest.mark.slow
def test_mirrored_x2_matches_single(examples, single, tmp_path):
  _, result = single
  job, history = _train(examples, str(tmp_path), "mirrored", devices=2)
  assert history["replicas"] == 2 and len(history["devices"]) == 2
  assert history["tf32"] is False
  mirrored = json.loads(tu.run_script(textwrap.dedent(f"""
      import json
      from tfx_parallel.components.common import tfenv
      tfenv.prepare()
      import tf_keras
      m = tf_keras.models.load_model({job["model_dir"]!r}, compile=False)
      print("RESULT" + json.dumps([w.tolist() for w in m.get_weights()]))
  """)).split("RESULT", 1)[1])
  _compare(result["ours"], mirrored, "mirrored x2 vs single", rtol=1e-5, atol=1e-6)
