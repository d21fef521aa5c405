"""``python -m tfgshare.runner FLAGS``: one training job attempt (see ``runner.protocol``).

``python -m tfgshare.runner --warm``: a warm runner that takes its job on stdin (``warm``).

Once the job has returned its exit code (its checkpoint written and closed, its last
event written), the process ends at once with ``os._exit``: the interpreter's own
teardown with TensorFlow loaded (module and graph destructors, thread pools) takes
1-25 s on a 2-core machine, during which the job would still hold its GPU and the
agent would wait for it (and kill it after its grace period).
"""

import logging
import os
import sys


def _end(code: int) -> None:
    """Flush what this process wrote and leave without the interpreter's teardown."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code if isinstance(code, int) else 1)


if sys.argv[1:] == ["--warm"]:
    from tfgshare.runner.warm import serve

    _end(serve())

from tfgshare.runner.main import main

_end(main())
