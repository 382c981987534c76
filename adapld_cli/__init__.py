"""adapld: edit source files with a local language model, fast and losslessly (AdaPLD)."""

__version__ = "0.1.0"
