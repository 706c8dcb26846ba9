"""polo: policy optimization for language models, built from small registered parts."""

__version__ = "0.1.0"
