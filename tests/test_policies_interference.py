"""The shared co-location slowdown model, and the policies' isolation from TensorFlow."""

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfgshare.policies.interference import max_slowdown, room_for, slowdown, util_room


def test_slowdown_is_one_alone_and_grows_with_demand_and_tenants():
    assert slowdown([]) == []
    assert slowdown([0.7]) == [1.0]
    assert slowdown([0.3, 0.3], overhead=0.05) == pytest.approx([1.05, 1.05])
    assert slowdown([0.9, 0.9], overhead=0.0) == pytest.approx([1.8, 1.8])
    assert max_slowdown([0.5, 0.5, 0.5], overhead=0.1) == pytest.approx(1.5 * 1.2)
    with pytest.raises(ValueError, match="outside"):
        slowdown([1.5])


@given(st.lists(st.floats(0, 1), max_size=5), st.floats(1, 3), st.floats(0, 0.3),
       st.floats(0, 1))
def test_util_room_is_the_exact_boundary_of_the_cap(utils, cap, overhead, u):
    room = util_room(utils, cap, overhead)
    assert room == room_for(len(utils), sum(utils), cap, overhead)
    slow = max_slowdown(utils + [u], overhead)
    if u <= room - 1e-9:
        assert slow <= cap + 1e-9   # within the cap (to rounding)
    if u >= room + 1e-9:
        # past it; at a cap that one more tenant's overhead meets to rounding
        # (cap 1, overhead 1e-9) the model says none may join, so only touching it counts
        assert slow >= cap - 1e-9


def test_policies_do_not_import_tensorflow():
    code = ("import sys\n"
            "from tfgshare.policies.registry import POLICY_NAMES, get_policy\n"
            "from tfgshare.policies.builders import make_cluster, make_job\n"
            "for n in POLICY_NAMES:\n"
            "    get_policy(n).decide(0, make_cluster(), [make_job('a')])\n"
            "assert not any(m.split('.')[0] in ('tensorflow', 'tf_slim', 'keras') "
            "for m in sys.modules), 'TensorFlow imported'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    assert out.returncode == 0, out.stderr
