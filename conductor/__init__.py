"""Conductor's shared plumbing (settings, logging, broker factory, wire codec, pool file, workflow language) and CLI."""

__version__ = "0.1.0"
