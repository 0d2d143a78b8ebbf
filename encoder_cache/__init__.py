"""Caches of processed media and encoder features, and the scheduler-side cache manager."""

from encoder_cache.processor_cache import ProcessorCache, ProcessorCacheStats

__all__ = ["ProcessorCache", "ProcessorCacheStats"]
