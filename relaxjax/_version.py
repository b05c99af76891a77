"""The package version (one place: the cache keys its entries with it)."""
__version__ = "0.1.0"
