"""The two step engines of a training run (run/train.py owns the run itself).

An engine builds the user's model, loss and optimizer for its layout, trains N steps
while driving the run's tf_keras callbacks at every execution boundary and every epoch's
end, and hands back
weights and state:

* :class:`FitEngine`: ``single``, ``mirrored``, ``multi_worker``; tf_keras ``model.fit``
  under a ``tf.distribute`` strategy (strategies.py), or none.
* :class:`MeshEngine`: ``mesh``; ``mesh_runtime.MeshTrainer`` on a DTensor (batch, model)
  mesh, with the layout rules of sharding.py. Like ``fit``, it runs
  ``steps_per_execution`` steps per call into TensorFlow (one DTensor function over that
  many stacked batches), drives the callbacks through the same Keras protocol, in the
  same order and with the same arguments as ``fit`` (train, epoch and batch hooks) and
  reports the running mean loss ``fit`` reports; the losses leave the devices once per
  execution.

Both give the run's Recorder (engines/callbacks.py) the exact loss of every step,
``step_losses(n)``: the mean over the step's global batch, from where the step computed
it (on the fit engine, step_losses.py), never recovered from a running mean.

Both take the loss from ``user_module.make_loss`` and the optimizer from the one
factory ``user_module.make_optimizer`` (the trainer's optimizers.py; on the mesh, built with
``mesh=``; ``written_optimizer`` is the optimizer as the user wrote it, which the run
records). Their common surface: ``model``, ``optimizer``, ``loss``, ``chief``,
``num_workers``, ``describe()``, ``variable_record()``, ``dataset(make, start_step)``,
``evaluator(eval_ds)``, ``train(dataset, start_step, total, callbacks,
steps_per_epoch)`` (Keras epochs are the run's epochs: engines/epochs.py),
``step_losses(n)``, ``weights()``, ``snapshot()`` (an early stop's best weights),
``checkpointed()`` (the model and optimizer a tf.train.Checkpoint saves and restores,
live: run/checkpoint.py), ``host_blocks`` (None, or how a checkpoint streams a
variable's blocks to the host), ``copy_weights_to(model, snapshot=None)`` (the export's host copy).
"""

# A package face: the engines live in fit_engine.py, mesh_engine.py and factory.py
# (``factory.create``); importing this package imports none of them.
