# Types for the compiled build of cluster.py (Cython reads this beside the .py; Python ignores it):
# the instance types cimported, so the routing loops' annotated locals read them in C.
from pddbench.sim.decode cimport DecodeInstance
from pddbench.sim.prefill cimport PrefillInstance
