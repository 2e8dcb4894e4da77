"""
The machinery the scripts stand on, which a learner never needs to read: how a script stops with one
line instead of a traceback (process.py), several processes training as one (distributed.py), files
written whole and folders held by one process (files.py), a run's checkpoint and log (run_files.py),
and the device and its clock (hardware.py).
"""
