"""Model families; :mod:`revolta_engine.models.registry` maps HF ``architectures`` to classes."""
