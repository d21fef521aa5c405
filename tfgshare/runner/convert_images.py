"""``tfgshare convert-images``: TF-Slim's image-folder converter, with TensorFlow's C++
start-up chatter (CUDA probing on a CPU node) muted as the runner mutes it."""

from __future__ import annotations

import sys

from tfgshare.runner.tf_setup import import_tensorflow_quietly


def main(argv: list[str] | None = None) -> int:
    """Convert a folder of class sub-folders to TFRecords (``slim_models.datasets.convert``)."""
    args = sys.argv[1:] if argv is None else argv
    if not {"-h", "--help"} & set(args):   # help needs no TensorFlow
        import_tensorflow_quietly()
    from slim_models.datasets import convert

    return convert.main(argv)
