"""trainscope's API doing nothing (bench/doctor/peers/shim_common.py): the plain run that
compare.py measures each tool's overhead against."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import shim_common  # noqa: E402

shim_common.make_api(globals(), shim_common.Backend)
