"""TF-Slim image classification models, datasets and preprocessing for tfgshare jobs.

- ``nets_factory``: model names, image sizes, ``check_model`` (no TensorFlow import)
  and ``get_network_fn`` (builds a net under its arg scope).
- ``nets/``: ``lenet``, ``cifarnet`` and ``mobilenet_v1`` in TF-Slim style; the other
  nets come from ``tf_slim.nets``.
- ``compat``: ``ensure_tf_compat()``, the tf-keras fix tf_slim needs on TF 2.16+.
- ``preprocessing/``: ``preprocessing_factory.get_preprocessing`` per model family.
- ``datasets/``: ``dataset_factory.get_dataset`` (synthetic, flowers, cifar10, imagenet,
  folder) with resumable, seed-ordered ``tf.data`` streams; ``convert`` writes a folder
  of images as TFRecords.

This package never imports TensorFlow at import time.
"""
