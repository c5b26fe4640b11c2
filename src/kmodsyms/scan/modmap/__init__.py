"""Module-map sources: which objects make up each built-in module."""
