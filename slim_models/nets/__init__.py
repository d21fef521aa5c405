"""Networks written here in TF-Slim style: ``lenet``, ``cifarnet``, ``mobilenet_v1``.

The other classifiers come from ``tf_slim.nets``; ``slim_models.nets_factory``
maps every model name to its builder.
"""
