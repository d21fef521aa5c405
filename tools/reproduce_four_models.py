"""The paper's four-model testbed experiment: ``tfgshare reproduce four-models`` as a script.

Usage: ``.venv/bin/python tools/reproduce_four_models.py [--policy fifo,fgs] [--scale small]
[--out DIR]`` (the same flags; see ``tfgshare/repro/four_models.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tfgshare.repro.four_models import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["four-models", *sys.argv[1:]]))
