"""Build the optional C kernels; everything else is configured in pyproject.toml.

``optional=True``: without a C compiler or Python headers the build skips an extension with a
warning and the pure-Python code is used: the miner's nonce search (miner/search.py logs which
one is active), the simulator's event engine (simulator/engine.py ``ENGINE_KERNEL``) and its tx
flow search (simulator/txflow.py ``FLOW_KERNEL``).
``-ffp-contract=off``: no fused multiply-add, so the flow kernel's and the uplinks' floating point
results equal Python's double arithmetic done in the same order.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "miner._kernel",
            sources=["miner/_kernel.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "simulator._engine",
            sources=["simulator/_engine.c"],
            extra_compile_args=["-O2", "-ffp-contract=off"],
            optional=True,
        ),
        Extension(
            "simulator._flow",
            sources=["simulator/_flow.c"],
            extra_compile_args=["-O3", "-ffp-contract=off"],
            optional=True,
        ),
    ]
)
