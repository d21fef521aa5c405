"""``python -m tfgshare.runner FLAGS``: one training job attempt (see ``runner.protocol``).

``python -m tfgshare.runner --warm``: a warm runner that takes its job on stdin (``warm``).

Right after its final event (``finished`` or ``suspended``: its checkpoint written and
closed, the event written), or once the job returned its exit code otherwise, the
process ends at once with ``os._exit``: closing the session and the interpreter's own
teardown with TensorFlow loaded (module and graph destructors, thread pools) take 1-25 s
on a 2-core machine, during which the job would still hold its GPU and the agent would
wait for it (and kill it after its grace period).
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


from tfgshare.runner import main as runner_main  # noqa: E402  (no TensorFlow import)

runner_main.EXIT_AT_FINAL_EVENT = _end

if sys.argv[1:] == ["--warm"]:
    from tfgshare.runner.warm import serve

    _end(serve())

_end(runner_main.main())
