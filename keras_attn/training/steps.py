"""One training step and one evaluation step, run on every replica of a strategy.

The runner's loop calls these instead of `model.fit`, so that the same
code trains on one device, on several local devices (MirroredStrategy)
and on several hosts (MultiWorkerMirroredStrategy, where Keras 3's `fit`
fails: keras-team/keras#20585). A step is what `fit` does:

    with tape:  outputs = model(inputs, training=True)
                loss = loss_fn(targets, outputs)          # this replica's part
    gradients = tape.gradient(loss, weights)
    optimizer.apply_gradients(gradients)                  # summed over replicas
    update the loss tracker and the metrics

with two differences:

- The gradients are summed over replicas before the optimizer sees them.
  Keras 3 clips (`clipnorm`, `global_clipnorm`, `clipvalue`) each
  replica's gradients before summing them, so a clipped run on several
  replicas differs from one device; here every strategy clips the
  global-batch gradient.
- `jit_compile` compiles only the model's forward pass (and with it the
  backward pass) with XLA. The loss, the gradient sum and the metric reads
  are collectives across replicas, which XLA cannot compile on CPUs
  ("Collectives are not yet implemented for CPU devices"), so they stay
  outside.
"""

import tensorflow as tf

from keras_attn import graph


class TrainingSteps:
    """The compiled train and evaluation steps of a compiled model under a strategy.

    The model is compiled as for `fit` (its optimizer, loss and metrics)
    inside `strategy.scope()`, and its metrics are built
    (`build_metrics`). Each step computes the loss with the model's own
    `compute_loss` and updates the metrics with its `compute_metrics`, as
    `fit`'s step does, so a task's loss and metrics are the same under
    `fit` and here. The loss on each replica is that replica's share of the
    global loss (Keras losses that average over the batch divide by the
    replica count themselves; ours divide by the global count); gradients
    are summed over replicas. `train(iterator)` runs one step on the next batch of a
    distributed iterator and returns the metrics so far; `evaluate(dataset)` runs a dataset.

    Args:
        model: `keras.Model`. The compiled model, its optimizer built for its weights.
        strategy: `tf.distribute.Strategy`. The strategy the model was built under.
        jit_compile: bool. Whether to compile the forward (and backward) pass with XLA.
            Defaults to `False`.

    Example:

        >>> # or `keras_attn.training.get_strategy("mirrored")`
        >>> strategy = tf.distribute.get_strategy()
        >>> dataset = tf.data.Dataset.from_tensors((np.ones((4, 3)), np.zeros(4))).repeat()
        >>> with strategy.scope():
        ...     model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        ...     model.compile(
        ...         keras.optimizers.SGD(0.1),
        ...         keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        ...         metrics=[keras.metrics.SparseCategoricalAccuracy("accuracy")],
        ...     )
        ...     model.optimizer.build(model.trainable_variables)
        ...     build_metrics(model, next(iter(dataset)))
        ...     steps = TrainingSteps(model, strategy)
        >>> iterator = iter(strategy.experimental_distribute_dataset(dataset))
        >>> sorted(steps.train(iterator))   # one step; the metrics so far
        ['accuracy', 'loss']
    """

    def __init__(self, model, strategy, jit_compile=False):
        self.model = model
        self.optimizer = optimizer = model.optimizer
        self.strategy = strategy
        # The steps sum the gradients themselves (see the module docstring);
        # the optimizer (and the one a LossScaleOptimizer wraps) must not sum
        # them again. `release()` undoes this.
        self._summing = [optimizer, getattr(optimizer, "inner_optimizer", optimizer)]
        for summing in self._summing:
            summing._all_reduce_sum_gradients = _already_summed  # noqa: SLF001
        # Keras lists the loss tracker first; the step weights it itself (`_update_metrics`).
        self.metrics = model.metrics
        self.loss_tracker = self.metrics[0]

        def forward(inputs, training):
            return model(inputs, training=training)

        if jit_compile:
            forward = graph.function(forward, jit_compile=True, reduce_retracing=True)
        self._forward = forward
        self.train = graph.function(self._train, reduce_retracing=True)
        self._evaluate_batch = graph.function(self._evaluate, reduce_retracing=True)
        self._results = graph.function(self.results)

    def _train(self, iterator):
        """Runs one step on the next batch of `iterator`; returns the metrics so far."""
        self.strategy.run(self._replica_train_step, args=(next(iterator),))
        return self.results()

    def _replica_train_step(self, data):
        inputs, targets = data
        weights = self.model.trainable_variables
        with tf.GradientTape() as tape:
            outputs = self._forward(inputs, training=True)
            loss = self._replica_loss(inputs, targets, outputs, True)
            scaled_loss = self.optimizer.scale_loss(loss)  # loss scaling of float16
        pairs = [
            (g, w) for g, w in zip(tape.gradient(scaled_loss, weights), weights) if g is not None
        ]
        gradients = tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, [g for g, _ in pairs]
        )
        self.optimizer.apply_gradients(zip(gradients, [w for _, w in pairs]))
        self._update_metrics(loss, inputs, targets, outputs)

    def _evaluate(self, data):
        def replica_step(data):
            inputs, targets = data
            outputs = self._forward(inputs, training=False)
            self._update_metrics(
                self._replica_loss(inputs, targets, outputs, False), inputs, targets, outputs
            )

        self.strategy.run(replica_step, args=(data,))

    def _replica_loss(self, inputs, targets, outputs, training):
        # The model's loss: its compiled loss, or a task's own `task_loss`, each with the layers'
        # own losses (`add_loss`, weight regularizers) as Keras adds them.
        return self.model.compute_loss(x=inputs, y=targets, y_pred=outputs, training=training)

    def _update_metrics(self, loss, inputs, targets, outputs):
        # The replicas' losses sum to the global batch's loss: weighting each
        # by an equal share of the global batch's rows averages the steps'
        # losses by batch size, as `fit` does (also when a replica has fewer
        # rows, or none, in a last, smaller batch).
        rows = tf.cast(tf.shape(tf.nest.flatten(inputs)[0])[0], "float32")
        context = tf.distribute.get_replica_context()
        global_rows = context.all_reduce(tf.distribute.ReduceOp.SUM, rows)
        replicas = self.strategy.num_replicas_in_sync
        self.loss_tracker.update_state(loss * replicas, sample_weight=global_rows / replicas)
        self.model.compute_metrics(inputs, targets, outputs)

    def evaluate(self, dataset):
        """Metrics of the model over a distributed `dataset` (all replicas, all workers).

        The metrics are reset first, so the values are this dataset's alone.

        Args:
            dataset: `tf.distribute.DistributedDataset`. Batches of `(inputs, targets)`,
                distributed by the strategy.

        Returns:
            A dict of float: the loss and the metrics, by name.
        """
        self.reset_metrics()
        for data in dataset:
            self._evaluate_batch(data)
        return {name: float(value) for name, value in self._results().items()}

    def results(self):
        """`{name: value}` of the loss tracker and the metrics, over all replicas.

        Returns:
            A dict of scalar tensors, by name (a metric whose result is a dict gives its
            entries).
        """
        logs = {}
        for metric in self.metrics:
            result = metric.result()
            logs.update(result if isinstance(result, dict) else {metric.name: result})
        return logs

    def release(self):
        """Gives the optimizer its own gradient sum back (e.g. for a later `fit`)."""
        for summing in self._summing:
            summing.__dict__.pop("_all_reduce_sum_gradients", None)

    @property
    def metric_variables(self):
        """The metrics' state, for backups: a resumed epoch then reports all its steps."""
        return [variable for metric in self.metrics for variable in metric.variables]

    def reset_metrics(self):
        """Resets the loss tracker and the metrics."""
        for metric in self.metrics:
            metric.reset_state()


def build_metrics(model, batch):
    """Creates the variables of a compiled model's metrics from one row of `(inputs, targets)`.

    Call it in the strategy's scope, before the steps are traced (a metric
    cannot create its variables inside a replica's step, `fit` builds them
    first too). The metrics are reset after.

    Args:
        model: `keras.Model`. The compiled model.
        batch: tuple. `(inputs, targets)`, a batch of the training data; its first row is
            used.
    """
    inputs, targets = tf.nest.map_structure(lambda tensor: tensor[:1], batch)
    outputs = model(inputs, training=False)
    model.compute_loss(x=inputs, y=targets, y_pred=outputs, training=False)
    model.compute_metrics(inputs, targets, outputs)
    for metric in model.metrics:
        metric.reset_state()


def _already_summed(grads_and_vars):
    return grads_and_vars
