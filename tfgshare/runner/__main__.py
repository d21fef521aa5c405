"""``python -m tfgshare.runner FLAGS``: one training job attempt (see ``runner.protocol``).

``python -m tfgshare.runner --warm``: a warm runner that takes its job on stdin (``warm``).
"""

import sys

if sys.argv[1:] == ["--warm"]:
    from tfgshare.runner.warm import serve

    sys.exit(serve())

from tfgshare.runner.main import main

sys.exit(main())
