"""Bundled data files (the `adapld demo` sample). Read with importlib.resources."""
