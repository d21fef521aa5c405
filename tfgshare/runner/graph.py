"""The training graph of one TF-Slim job, built as TF-Slim's train_image_classifier does.

Input pipeline (dataset -> preprocessing -> batches, from a start position fed when
its iterator is initialised), one model replica ("tower", "clone" in TF-Slim) per GPU
with its share of the batch, averaged gradients, the chosen optimizer and
learning-rate schedule, batch-norm updates from the first tower, the step counters a
resumed job needs, and the checkpoint's save and restore ops. The graph does not
depend on where the job resumes, so ``graph_file`` can export it once and import it
on every later attempt.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
from dataclasses import dataclass

import tensorflow as tf

from tfgshare.runner.checkpoint import POSITION_VARIABLE, SPEC_VARIABLE, JobCheckpoint
from tfgshare.runner.config import TrainConfig
from tfgshare.runner.gang_graph import device_setter, gang_ops
from tfgshare.runner.protocol import BadInputError
from tfgshare.runner.rng import KeyedRandomGraph

AUX_LOSS_WEIGHT = 0.4  # TF-Slim's weight for inception's auxiliary logits


@dataclass
class TrainingGraph:
    """Handles on a built (or imported) training graph."""

    graph: tf.Graph
    train_tensor: tf.Tensor       # total loss, evaluated after the update ran
    global_step: tf.Variable
    learning_rate: tf.Tensor
    step_key: tf.Tensor           # fed the step number: keys the step's random draws
    position: tf.Variable         # input stream position of the next batch
    start_example: tf.Tensor      # fed to ``input_init``: where the input stream starts
    input_init: tf.Operation      # (re)starts the input stream at ``start_example``
    variables: list | None        # every global variable (what a checkpoint holds); None in
                                  # an imported copy (``checkpoint.stored`` names them there)
    init_op: tf.Operation
    checkpoint: JobCheckpoint     # saves and restores ``variables``
    devices: list[str]            # one per tower
    images_per_step: int
    image_size: int
    num_classes: int
    num_samples: int
    # a gang member only (see runner.gang_graph): the global step read after the step ran,
    # and the set-up ops of between-graph replication (local init, readiness, sync tokens)
    step_after: tf.Tensor | None = None
    replicas: dict | None = None

    # graph elements found by name after an import, and plain values
    _ELEMENTS = ("train_tensor", "global_step", "learning_rate", "step_key", "position",
                 "start_example", "input_init", "init_op")
    _VALUES = ("devices", "images_per_step", "image_size", "num_classes", "num_samples")

    _VARIABLES = ("global_step", "position")   # the variables a run reads itself

    def handles(self) -> dict:
        """What ``from_handles`` needs to find this graph's parts in an imported copy."""
        names = {key: _element_name(getattr(self, key)) for key in self._ELEMENTS
                 if key not in self._VARIABLES}
        with self.graph.as_default():
            defs = {key: base64.b64encode(getattr(self, key).to_proto().SerializeToString())
                    .decode() for key in self._VARIABLES}
        return {"elements": names, "variables": defs,
                "values": {key: getattr(self, key) for key in self._VALUES},
                "checkpoint": self.checkpoint.op_names(), "stored": self.checkpoint.stored}

    @staticmethod
    def ops_of_handles(handles: dict) -> list[str]:
        """The names of the operations ``from_handles`` looks up (all others it never uses)."""
        from tensorflow.core.framework import variable_pb2

        names = [*handles["elements"].values(), *handles["checkpoint"].values()]
        for encoded in handles["variables"].values():
            proto = variable_pb2.VariableDef.FromString(base64.b64decode(encoded))
            names += [proto.variable_name, proto.initializer_name, proto.snapshot_name,
                      proto.initial_value_name]
        return sorted({name.split(":")[0] for name in names if name})

    @classmethod
    def from_handles(cls, graph: tf.Graph, handles: dict, config: TrainConfig) -> "TrainingGraph":
        """The TrainingGraph of ``graph``, an imported copy of one with ``handles``."""
        from tensorflow.core.framework import variable_pb2

        found = {key: graph.as_graph_element(name) for key, name in handles["elements"].items()}
        with graph.as_default():
            for key, encoded in handles["variables"].items():
                proto = variable_pb2.VariableDef.FromString(base64.b64decode(encoded))
                found[key] = tf.compat.v1.Variable.from_proto(proto)
        checkpoint = JobCheckpoint.from_graph(graph, handles["checkpoint"], config.train_dir,
                                              handles["stored"], config.max_to_keep, config.epoch)
        return cls(graph=graph, variables=None, checkpoint=checkpoint, **found,
                   **handles["values"])


def _element_name(element) -> str:
    return element.op.name if isinstance(element, tf.Variable) else element.name


def tower_devices(num_towers: int) -> list[str]:
    """One device per tower: the visible GPUs, or all on /cpu:0 without GPUs."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return ["/cpu:0"] * num_towers
    if num_towers > len(gpus):
        raise BadInputError(f"--num_gpus {num_towers} but only {len(gpus)} GPU(s) are visible "
                            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
    return [f"/gpu:{i}" for i in range(num_towers)]


def job_spec(config: TrainConfig, image_size: int, num_classes: int) -> dict:
    """What a checkpoint records about the job that wrote it."""
    return {"model_name": config.model_name, "num_classes": num_classes,
            "image_size": image_size, "optimizer": config.optimizer,
            "dataset_name": config.dataset_name, "batch_size": config.batch_size,
            "num_gpus": config.num_gpus}


def load_dataset(config: TrainConfig):
    """The slim dataset object the config names (BadInputError when it cannot be had)."""
    from slim_models.datasets import dataset_factory

    try:
        return dataset_factory.get_dataset(
            config.dataset_name, config.dataset_split_name, config.dataset_dir,
            image_size=config.image_size, num_classes=config.num_classes)
    except (ValueError, FileNotFoundError, OSError, KeyError) as exc:
        raise BadInputError(f"dataset {config.dataset_name!r}: {exc}") from None


def _input_batches(config: TrainConfig, dataset, image_size: int, start_example, batch: int):
    from slim_models.preprocessing import preprocessing_factory

    preprocess = preprocessing_factory.get_preprocessing(config.model_name, is_training=True)
    seed = tf.constant(config.seed, tf.int64)

    def prepare(image, label, position):
        # distortions keyed by the example's stream position: a resumed job sees
        # exactly the inputs it would have seen without stopping
        return preprocess(image, image_size, image_size, seed=tf.stack([seed, position])), label

    data = dataset.tf_dataset(start_example=start_example, seed=config.seed, with_position=True)
    if config.in_gang:   # each worker reads its own share of the one stream
        data = data.shard(config.worker_replicas, config.task)
    data = data.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    data = data.batch(batch, drop_remainder=True).prefetch(2)
    iterator = tf.compat.v1.data.make_initializable_iterator(data)
    images, labels = iterator.get_next()
    images.set_shape([batch, image_size, image_size, images.shape[-1]])
    return images, tf.reshape(labels, [batch]), iterator.initializer


def _learning_rate(config: TrainConfig, global_step, num_samples: int):
    lr = config.learning_rate
    if config.learning_rate_decay_type == "fixed":
        return tf.constant(lr, name="fixed_learning_rate")
    decay_steps = max(1, int(num_samples * config.num_epochs_per_decay / config.batch_size))
    if config.learning_rate_decay_type == "exponential":
        return tf.compat.v1.train.exponential_decay(
            lr, global_step, decay_steps, config.learning_rate_decay_factor,
            staircase=True, name="exponential_decay_learning_rate")
    return tf.compat.v1.train.polynomial_decay(
        lr, global_step, decay_steps, config.end_learning_rate, power=1.0, cycle=False,
        name="polynomial_decay_learning_rate")


def _optimizer(config: TrainConfig, learning_rate):
    train = tf.compat.v1.train
    if config.optimizer == "sgd":
        return train.GradientDescentOptimizer(learning_rate)
    if config.optimizer == "momentum":
        return train.MomentumOptimizer(learning_rate, momentum=config.momentum, name="Momentum")
    if config.optimizer == "rmsprop":
        return train.RMSPropOptimizer(learning_rate, decay=config.rmsprop_decay,
                                      momentum=config.rmsprop_momentum,
                                      epsilon=config.opt_epsilon)
    return train.AdamOptimizer(learning_rate, beta1=config.adam_beta1,
                               beta2=config.adam_beta2, epsilon=config.opt_epsilon)


def _tower_loss(logits, end_points, labels, num_classes: int, label_smoothing: float):
    onehot = tf.one_hot(labels, num_classes)
    loss = tf.compat.v1.losses.softmax_cross_entropy(
        onehot, logits, label_smoothing=label_smoothing, loss_collection=None)
    if "AuxLogits" in end_points:
        loss += AUX_LOSS_WEIGHT * tf.compat.v1.losses.softmax_cross_entropy(
            onehot, end_points["AuxLogits"], label_smoothing=label_smoothing,
            loss_collection=None)
    return loss


def _average_gradients(tower_grads: list[list]) -> list:
    averaged = []
    for pairs in zip(*tower_grads):
        var = pairs[0][1]
        grads = [g for g, _ in pairs if g is not None]
        if not grads:
            continue
        averaged.append((grads[0] if len(grads) == 1 else tf.add_n(grads) / len(grads), var))
    return averaged


def build_training_graph(config: TrainConfig, dataset=None) -> TrainingGraph:
    """Build the full training graph of ``config``.

    Before the first step, run ``init_op``, restore or not, then ``input_init`` fed
    with the ``position`` to read from (``start_input`` does the last).
    """
    from slim_models import nets_factory
    from slim_models.compat import ensure_tf_compat
    import tf_slim as slim

    ensure_tf_compat()
    dataset = dataset or load_dataset(config)
    num_classes = dataset.num_classes
    image_size = config.image_size or nets_factory.default_image_size(config.model_name)
    towers = config.num_gpus
    devices = tower_devices(towers)
    variables_device = "/cpu:0" if towers > 1 or config.in_gang else devices[0]
    graph = KeyedRandomGraph(config.seed)
    placement = contextlib.nullcontext()
    if config.in_gang:   # variables on the parameter servers, the rest on this worker
        placement = graph.device(device_setter(config))
    with graph.as_default(), placement:
        tf.compat.v1.set_random_seed(config.seed)
        with tf.device("/cpu:0"):
            global_step = tf.compat.v1.train.get_or_create_global_step()
            position = tf.compat.v1.get_variable(
                POSITION_VARIABLE, initializer=tf.constant(0, tf.int64), trainable=False)
            tf.compat.v1.get_variable(
                SPEC_VARIABLE, trainable=False, initializer=tf.constant(
                    json.dumps(job_spec(config, image_size, num_classes), sort_keys=True)))
            start_example = tf.compat.v1.placeholder(tf.int64, [], name="start_example")
            images, labels, input_init = _input_batches(
                config, dataset, image_size, start_example, config.batch_size * towers)
            image_splits = tf.split(images, towers)
            label_splits = tf.split(labels, towers)
            learning_rate = _learning_rate(config, global_step, dataset.num_samples)
            optimizer = _optimizer(config, learning_rate)
            if config.in_gang and config.sync_replicas:
                optimizer = tf.compat.v1.train.SyncReplicasOptimizer(
                    optimizer, total_num_replicas=config.worker_replicas,
                    replicas_to_aggregate=config.replicas_to_aggregate or config.worker_replicas)

        network_fn = nets_factory.get_network_fn(
            config.model_name, num_classes, weight_decay=config.weight_decay, is_training=True)
        tower_grads, losses = [], []
        for i, device in enumerate(devices):
            with tf.name_scope(f"clone_{i}"), tf.device(device), \
                    tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=i > 0), \
                    slim.arg_scope([slim.model_variable, slim.variable], device=variables_device):
                logits, end_points = network_fn(image_splits[i])
                loss = _tower_loss(logits, end_points, label_splits[i], num_classes,
                                   config.label_smoothing)
                total = loss / towers
                if i == 0:
                    regularization = tf.compat.v1.losses.get_regularization_losses()
                    if regularization:
                        total += tf.add_n(regularization, name="regularization_loss")
                losses.append(total)
                tower_grads.append(optimizer.compute_gradients(total))
        with tf.device(variables_device):
            total_loss = tf.add_n(losses, name="total_loss")
            grads = _average_gradients(tower_grads)
            if not grads:
                raise BadInputError(f"model {config.model_name} has no trainable variables")
            apply_op = optimizer.apply_gradients(grads, global_step=global_step)
            update_ops = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS, "clone_0")
            advance = position.assign_add(config.batch_size * towers)
            with tf.control_dependencies([apply_op, advance, *update_ops]):
                train_tensor = tf.identity(total_loss, name="train_op")
        variables = tf.compat.v1.global_variables()
        checkpoint = JobCheckpoint.build(config.train_dir, variables, config.max_to_keep,
                                         config.epoch)
        init_op = tf.compat.v1.global_variables_initializer()
        step_after = replica_ops = None
        if config.in_gang:
            step_after, replica_ops = gang_ops(train_tensor, global_step, optimizer, variables)
    return TrainingGraph(graph, train_tensor, global_step, learning_rate, graph.step_key,
                         position, start_example, input_init, variables, init_op, checkpoint,
                         devices, config.batch_size * towers, image_size, num_classes,
                         dataset.num_samples, step_after, replica_ops)


def start_input(session, built: TrainingGraph) -> int:
    """Start ``built``'s input stream at its ``position`` variable; returns the position."""
    position = int(session.run(built.position))
    session.run(built.input_init, {built.start_example: position})
    return position


# Grappler (TensorFlow's graph optimiser) on a CPU-only process (virtual GPUs): "light"
# runs one pass over the graph with only the passes that shrink it (pruning, common
# subgraph elimination, dependency optimisation) and skips the rest, which cost most of a
# resumed job's first step on the CPU (resnet_v1_50: 2.86 -> 1.20 CPU s, inception_v3:
# 3.04 -> 1.27) and did not make steady steps faster there (docs/benchmarks.md, Runner);
# "default" runs TensorFlow's defaults. A process that sees GPUs always runs the
# defaults (layout and fusion passes matter there).
CPU_GRAPH_PASSES = "light"
_CPU_PASSES_OFF = ("layout_optimizer", "constant_folding", "shape_optimization", "remapping",
                   "arithmetic_optimization", "loop_optimization", "function_optimization",
                   "implementation_selector")


def light_graph_passes(proto: "tf.compat.v1.ConfigProto") -> None:
    """Set ``proto``'s grappler options to the light CPU passes (CPU_GRAPH_PASSES)."""
    from tensorflow.core.protobuf import rewriter_config_pb2

    rewriter = rewriter_config_pb2.RewriterConfig
    options = proto.graph_options.rewrite_options
    for name in _CPU_PASSES_OFF:
        setattr(options, name, rewriter.OFF)
    options.memory_optimization = rewriter.NO_MEM_OPT
    options.disable_tfg_optimizer = True
    options.meta_optimizer_iterations = rewriter.ONE


def make_devices(config: TrainConfig) -> str | None:
    """Make this process's TensorFlow devices with ``session_config(config)``'s options;
    None, or why the devices already made differ from them.

    The first to make the devices fixes the process's CPU thread pools and GPU allocators,
    and tracing a tf.data function makes them through the eager context with TensorFlow's
    default options. Left to that, a graph built in the process and the same graph
    imported from its file would run with different thread counts (and round
    differently), and on a GPU the eager context would map the whole memory, not the
    job's fraction. So the eager context is given the session's options and made first.
    """
    from tensorflow.python.eager import context

    proto = session_config(config)
    ctx = context.context()
    if not ctx._initialized:   # noqa: SLF001 (no public setter for the whole ConfigProto)
        ctx._config = proto    # noqa: SLF001
        ctx.ensure_initialized()
        return None
    made = ctx.config
    differs = [f"{name} {want} (made with {have})" for name, want, have in (
        ("intra_op_threads", proto.intra_op_parallelism_threads,
         made.intra_op_parallelism_threads),
        ("inter_op_threads", proto.inter_op_parallelism_threads,
         made.inter_op_parallelism_threads),
        ("memory_fraction", proto.gpu_options.per_process_gpu_memory_fraction,
         made.gpu_options.per_process_gpu_memory_fraction)) if want != have
        and (name != "memory_fraction" or tf.config.list_physical_devices("GPU"))]
    if differs:
        return ("this process's TensorFlow devices were made earlier: not in effect: "
                + ", ".join(differs))
    return None


def session_config(config: TrainConfig) -> "tf.compat.v1.ConfigProto":
    """The ConfigProto a job's session runs with: its GPU memory fraction, threads, and
    on a CPU-only process the grappler passes of ``CPU_GRAPH_PASSES``."""
    proto = tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        intra_op_parallelism_threads=config.intra_op_threads,
        inter_op_parallelism_threads=config.inter_op_threads)
    proto.gpu_options.per_process_gpu_memory_fraction = config.memory_fraction
    if CPU_GRAPH_PASSES == "light" and not tf.config.list_physical_devices("GPU"):
        light_graph_passes(proto)
    return proto
