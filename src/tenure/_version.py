"""tenure's version, in a base module of its own: the worker's registry row and the
tracer name it, and they sit below the package's face (`tenure/__init__.py`)."""

__version__ = "0.1.0"
