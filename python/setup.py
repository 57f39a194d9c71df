"""hcomm for Python: a pure-Python package over libhcomm.so (ctypes).

A setup.py without a pyproject.toml on purpose: pip then builds with the
setuptools already installed (Debian's python3-setuptools), without
fetching build dependencies, so `pip install ./python` works offline.
"""

from setuptools import setup

setup(
    name="hcomm",
    version="0.1.0",
    description="Host-device data movement with few copies and system calls (Python binding of libhcomm)",
    long_description=open("README.md").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.9",
    packages=["hcomm"],
    extras_require={"numpy": ["numpy"], "torch": ["torch"]},
    classifiers=["Programming Language :: Python :: 3", "Operating System :: POSIX :: Linux",
                 "License :: OSI Approved :: MIT License"],
)
