from .parser import parse

__all__ = ["parse"]
