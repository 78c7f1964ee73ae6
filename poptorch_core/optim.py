"""Under construction."""
__all__ = []
