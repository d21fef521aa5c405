"""``python -m tfgshare.runner FLAGS``: one training job attempt (see ``runner.protocol``)."""

import sys

from tfgshare.runner.main import main

sys.exit(main())
