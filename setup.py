"""Build the optional C nonce-search kernel; everything else is configured in pyproject.toml.

``optional=True``: without a C compiler or Python headers the build skips the extension with a
warning and the miner uses the pure-Python search (miner/search.py logs which one is active).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "miner._kernel",
            sources=["miner/_kernel.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
